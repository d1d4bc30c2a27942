package payments

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// pacer spaces the sweeper's lookups: at most SWEEP_PROVIDER_RATE a second
// to each provider from this instance, so a provider recovering from an
// outage is not hammered by the backlog the outage left. A merchant's own
// request (a retry, a poll) and a provider's webhook are never paced: they
// are one lookup each, and someone is waiting on them. (Copies of one
// webhook are refused instead, past a few lookups: hookLookupBurst.)
type pacer struct {
	limit rate.Limit
	mu    sync.Mutex
	by    map[string]*rate.Limiter
}

func newPacer(perSecond float64) *pacer {
	if perSecond <= 0 {
		return nil
	}
	return &pacer{limit: rate.Limit(perSecond), by: map[string]*rate.Limiter{}}
}

// wait blocks until provider may be asked again, or ctx ends.
func (p *pacer) wait(ctx context.Context, provider string) error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	l, ok := p.by[provider]
	if !ok {
		// A burst of one: the rate is the promise, from the first lookup.
		l = rate.NewLimiter(p.limit, 1)
		p.by[provider] = l
	}
	p.mu.Unlock()
	return l.Wait(ctx)
}

type pacedKey struct{}

// paced marks ctx as the sweeper's: its lookups wait for the pacer.
func paced(ctx context.Context) context.Context { return context.WithValue(ctx, pacedKey{}, true) }

// pace waits for the pacer when ctx is the sweeper's. A claim's turn must
// come within the first half of its lease (claim's LeaseEnds less half a
// lease), leaving the rest for the lookup and its recording; a later turn
// is refused at once (the limiter knows), and the key left for the next
// run rather than looked up by a worker that may no longer own it.
func (s *Service) pace(ctx context.Context, provider string, leaseEnds time.Time) error {
	if on, _ := ctx.Value(pacedKey{}).(bool); !on {
		return nil
	}
	if !leaseEnds.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, leaseEnds.Add(-s.cfg.Lease/2))
		defer cancel()
	}
	if err := s.pacer.wait(ctx, provider); err != nil {
		return fmt.Errorf("%w: %w", errNoTurn, err)
	}
	return nil
}

// errNoTurn is the pacer's refusal: this instance's SWEEP_PROVIDER_RATE
// had no turn for the work within its lease. Nothing was asked, so it says
// nothing about the provider: a recheck refused it is looked at again
// soon, and never counted as a provider that could not be asked (which,
// past REVIEW_AFTER, reinstates a payment or gives a refund's recheck up).
var errNoTurn = errors.New("payments: no turn at the provider's pace within the lease")
