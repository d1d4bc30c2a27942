package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// Taker decides one request: a Limiter (this instance's memory) or a
// Shared (Redis, shared by every instance).
type Taker interface {
	// Take takes a token from key's bucket, or says how long until there
	// will be one.
	Take(ctx context.Context, key string) (ok bool, retryAfter time.Duration)
}

// Take is Allow, for the Taker interface.
func (l *Limiter) Take(_ context.Context, key string) (bool, time.Duration) { return l.Allow(key) }

// Backends a decision was made by (SharedConfig.Observe).
const (
	BackendRedis  = "redis"
	BackendMemory = "memory"
)

// Shared limits each key across every gateway instance: one GCRA state per
// key in Redis (github.com/go-redis/redis_rate, a Lua script that reads
// Redis's own clock, so instances whose clocks disagree still share one
// bucket). The rate and burst are those of the local limiter.
//
// Redis is an optimisation of fairness, never a dependency of a payment:
// when it does not answer within CallTimeout the request is decided by the
// local Limiter (this instance's memory: N instances then admit up to N
// times the rate, as without Redis), and Redis is not asked again for
// RetryEvery, so an unreachable Redis costs at most one timeout per
// RetryEvery instead of one per request. Going down and coming back are
// logged once each (a warning, then at most every WarnEvery while it
// stays down), and reported to Observe and Up for the metrics.
type Shared struct {
	*server
	lim    *redis_rate.Limiter
	limit  redis_rate.Limit
	prefix string
	// namespace names this limit in its decisions (SharedConfig.Observe).
	namespace string
	local     *Limiter
}

// server is the Redis a Shared and its Siblings ask, and whether it
// answers.
type server struct {
	rdb     *redis.Client
	cfg     SharedConfig
	closing sync.Once
	mu      sync.Mutex
	down    bool
	retryAt time.Time
	warned  time.Time
}

// SharedConfig configures a Shared limiter.
type SharedConfig struct {
	// URL is the Redis URL (redis://…, rediss://…). A secret: it is never
	// logged.
	URL string
	// KeyPrefix starts every key written; keys are
	// rate:<KeyPrefix><Namespace>:<key>.
	KeyPrefix string
	// Namespace is this limit's among those sharing KeyPrefix ("ratelimit"
	// if empty). No colon: "a" and "a:b" would share keys.
	Namespace string
	// Local decides while Redis is unreachable; its rate and burst are the
	// shared limit's.
	Local *Limiter
	// CallTimeout bounds one Redis round trip (100ms if zero).
	CallTimeout time.Duration
	// RetryEvery is how long Redis is left alone after a failure (1s if
	// zero).
	RetryEvery time.Duration
	// WarnEvery bounds the warnings while Redis stays down (1m if zero).
	WarnEvery time.Duration
	// Log receives the down and up messages.
	Log *slog.Logger
	// Observe, when set, counts each decision by limit (the deciding
	// limit's namespace) and backend (BackendRedis or BackendMemory).
	Observe func(limit, backend string)
	// Up, when set, is told whether Redis answered the last call.
	Up func(up bool)
}

// NewShared builds a Shared limiter. The connection is lazy: a Redis that
// is down at start only means the local limiter decides until it answers.
func NewShared(cfg SharedConfig) (*Shared, error) {
	if cfg.Local == nil {
		return nil, errors.New("ratelimit: Shared needs a Local limiter")
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "ratelimit"
	}
	if strings.Contains(cfg.Namespace, ":") {
		return nil, errors.New("ratelimit: a Namespace has no colon")
	}
	opt, err := redis.ParseURL(cfg.URL)
	if err != nil {
		// The parser's message may quote the URL, a secret: not passed on.
		return nil, errors.New("ratelimit: REDIS_URL is not a Redis URL")
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 100 * time.Millisecond
	}
	if cfg.RetryEvery <= 0 {
		cfg.RetryEvery = time.Second
	}
	if cfg.WarnEvery <= 0 {
		cfg.WarnEvery = time.Minute
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	// No retries and short timeouts: a slow Redis must not slow requests,
	// the local limiter answers instead.
	opt.MaxRetries = -1
	opt.DialTimeout = cfg.CallTimeout * 2
	opt.ReadTimeout = cfg.CallTimeout
	opt.WriteTimeout = cfg.CallTimeout
	opt.PoolSize = 32
	opt.MinIdleConns = 0
	opt.ContextTimeoutEnabled = true
	// go-redis prints its own lines (a dial that failed, a pool that
	// cannot grow) to stderr as plain text, one a second under traffic
	// while Redis is away; they go through slog instead, at DEBUG: the
	// limiter WARNs about the outage itself, once every WarnEvery.
	redis.SetLogger(redisLog{cfg.Log})
	return sharedOn(&server{rdb: redis.NewClient(opt), cfg: cfg}, cfg.Namespace, cfg.Local), nil
}

// Sibling is another limit in the same Redis, with local's rate and burst
// (local deciding while Redis does not answer) and keys
// rate:<KeyPrefix><namespace>:<key>, apart from every other namespace's.
// It asks over s's client, not a pool of its own, and shares s's
// up-or-down state: an outage is one warning, not one a limit. Closing
// either closes both.
func (s *Shared) Sibling(namespace string, local *Limiter) *Shared {
	if namespace == "" || strings.Contains(namespace, ":") || local == nil {
		panic("ratelimit: Sibling needs a namespace without a colon and a Local limiter")
	}
	return sharedOn(s.server, namespace, local)
}

func sharedOn(srv *server, namespace string, local *Limiter) *Shared {
	return &Shared{
		server:    srv,
		lim:       redis_rate.NewLimiter(srv.rdb),
		limit:     gcraLimit(float64(local.limit), local.burst),
		prefix:    srv.cfg.KeyPrefix + namespace + ":",
		namespace: namespace,
		local:     local,
	}
}

// gcraLimit is rate a second with burst as redis_rate's Limit, which takes
// a whole number of events per period: a fractional rate becomes events
// per 1000 s (0.5/s → 500 per 1000 s), the same emission interval.
func gcraLimit(rate float64, burst int) redis_rate.Limit {
	if rate == math.Trunc(rate) && rate >= 1 {
		return redis_rate.Limit{Rate: int(rate), Burst: burst, Period: time.Second}
	}
	return redis_rate.Limit{Rate: max(1, int(math.Round(rate*1000))), Burst: burst, Period: 1000 * time.Second}
}

// Take decides key's request in Redis, or in the local limiter while
// Redis is unreachable.
func (s *Shared) Take(ctx context.Context, key string) (bool, time.Duration) {
	if s.asking(time.Now()) {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
		res, err := s.lim.Allow(cctx, s.prefix+key, s.limit)
		cancel()
		if err == nil {
			s.answered()
			s.observe(s.namespace, BackendRedis)
			if res.Allowed > 0 {
				return true, 0
			}
			return false, res.RetryAfter
		}
		if ctx.Err() != nil { // the request went away, Redis did not
			return s.local.Allow(key)
		}
		s.failed(err)
	}
	s.observe(s.namespace, BackendMemory)
	return s.local.Allow(key)
}

// Ping asks Redis whether it answers, for readiness.
func (s *server) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 4*s.cfg.CallTimeout)
	defer cancel()
	return s.rdb.Ping(ctx).Err()
}

// Close closes the Redis connections (once, whichever sibling asks).
func (s *server) Close() error {
	var err error
	s.closing.Do(func() { err = s.rdb.Close() })
	return err
}

// Down reports whether the local limiter is deciding because Redis did not
// answer.
func (s *server) Down() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.down
}

// asking reports whether Redis should be asked now: always while it
// answers, once per RetryEvery after it failed.
func (s *server) asking(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.down {
		return true
	}
	if now.Before(s.retryAt) {
		return false
	}
	s.retryAt = now.Add(s.cfg.RetryEvery) // this caller probes; the others wait
	return true
}

func (s *server) answered() {
	s.mu.Lock()
	was := s.down
	s.down = false
	s.mu.Unlock()
	if was {
		s.cfg.Log.Info("rate limiter: Redis answers again; limits are shared across instances")
	}
	if s.cfg.Up != nil {
		s.cfg.Up(true)
	}
}

func (s *server) failed(err error) {
	now := time.Now()
	s.mu.Lock()
	s.down = true
	s.retryAt = now.Add(s.cfg.RetryEvery)
	warn := now.Sub(s.warned) >= s.cfg.WarnEvery
	if warn {
		s.warned = now
	}
	s.mu.Unlock()
	if warn {
		s.cfg.Log.Warn("rate limiter: Redis unreachable; limiting in this instance's memory until it answers",
			"err", redactedErr(err), "retry_every", s.cfg.RetryEvery)
	}
	if s.cfg.Up != nil {
		s.cfg.Up(false)
	}
}

func (s *server) observe(limit, backend string) {
	if s.cfg.Observe != nil {
		s.cfg.Observe(limit, backend)
	}
}

// redactedErr keeps the kind of a Redis error without anything that could
// carry the URL's credentials (go-redis's dial errors name only the
// address, but the message is not ours to trust).
func redactedErr(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, redis.ErrClosed):
		return "client closed"
	}
	var re redis.Error
	if errors.As(err, &re) {
		return fmt.Sprintf("redis error: %s", re.Error())
	}
	var ne *net.OpError // "dial tcp 127.0.0.1:6379: connect: connection refused": an address, no credentials
	if errors.As(err, &ne) {
		return ne.Error()
	}
	return fmt.Sprintf("%T", err)
}

// redisLog is go-redis's logger, as structured lines.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "redis: "+fmt.Sprintf(format, v...))
}
