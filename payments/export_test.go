package payments

import (
	"time"

	"github.com/oncepay/gateway/app/ratelimit"
)

// The bound on the lookups webhooks cause: HookLookupBurst at once, then
// one every HookLookupEvery.
const (
	HookLookupBurst = hookLookupBurst
	HookLookupEvery = hookLookupEvery
)

// SetWebhookClock replaces the clock of the webhook lookups' limit, for
// tests that make time pass; the limit must be this instance's (no
// REDIS_URL): Redis keeps its own time.
func (s *Service) SetWebhookClock(now func() time.Time) {
	l, ok := s.hookLookups.(*ratelimit.Limiter)
	if !ok {
		panic("payments: SetWebhookClock on a webhook lookup bound shared in Redis")
	}
	l.SetClock(now)
}
