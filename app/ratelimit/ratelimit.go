// Package ratelimit limits request rates per key (the merchant id on /v1
// merchant routes) with a token bucket per key: Rate tokens a second, up to
// Burst saved.
//
// A Limiter's buckets are in-process, one set per gateway instance: N
// instances behind a load balancer admit up to N times the configured rate
// for a merchant. With REDIS_URL the gateway uses Shared instead: one GCRA
// state per merchant in Redis, shared by every instance, with a Limiter as
// its fallback while Redis does not answer (shared.go); the bound on the
// provider lookups webhooks cause is a Sibling of it, in the same Redis.
//
// Memory is bounded: a bucket left idle long enough to refill completely is
// indistinguishable from a new one, so it is forgotten (IdleAfter), and at
// most MaxKeys buckets are kept at once.
package ratelimit

import (
	"math"
	"strings"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"golang.org/x/time/rate"

	"github.com/oncepay/gateway/app/problem"
)

// DefaultMaxKeys bounds the buckets kept at once when Config.MaxKeys is 0.
const DefaultMaxKeys = 100_000

// minIdleAfter keeps a bucket at least this long after its last use, so a
// merchant with a fast refill does not churn the map.
const minIdleAfter = time.Minute

// Config configures a Limiter.
type Config struct {
	// Rate is the sustained rate, in requests per second. Must be > 0.
	Rate float64
	// Burst is how many requests a key may make at once; values below 1
	// are taken as 1 (a bucket of size 0 would refuse everything).
	Burst int
	// IdleAfter is how long an unused bucket is kept. Zero: the time a
	// bucket takes to refill from empty (Burst/Rate), at least a minute,
	// so forgetting it never grants more than a full bucket would.
	IdleAfter time.Duration
	// MaxKeys bounds the buckets kept at once (DefaultMaxKeys if 0). Past
	// it, idle buckets are swept, and if none is idle an arbitrary one is
	// dropped: that key starts over with a full bucket.
	MaxKeys int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Limiter is a set of token buckets, one per key. It is safe for
// concurrent use.
type Limiter struct {
	limit     rate.Limit
	burst     int
	idleAfter time.Duration
	maxKeys   int

	mu        sync.Mutex
	now       func() time.Time
	buckets   map[string]*bucket
	lastSweep time.Time
}

type bucket struct {
	lim  *rate.Limiter
	seen time.Time
}

// New builds a Limiter. It panics if cfg.Rate is not positive: a disabled
// limit is no Limiter at all.
func New(cfg Config) *Limiter {
	if !(cfg.Rate > 0) {
		panic("ratelimit: Rate must be positive")
	}
	l := &Limiter{
		limit:     rate.Limit(cfg.Rate),
		burst:     max(cfg.Burst, 1),
		idleAfter: cfg.IdleAfter,
		maxKeys:   cfg.MaxKeys,
		now:       cfg.Now,
		buckets:   map[string]*bucket{},
	}
	if l.idleAfter <= 0 {
		refill := time.Duration(float64(l.burst) / cfg.Rate * float64(time.Second))
		l.idleAfter = max(refill, minIdleAfter)
	}
	if l.maxKeys <= 0 {
		l.maxKeys = DefaultMaxKeys
	}
	if l.now == nil {
		l.now = time.Now
	}
	return l
}

// SetClock replaces the clock, for tests that make time pass.
func (l *Limiter) SetClock(now func() time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.now = now
}

// Allow takes a token from key's bucket. When there is none it takes
// nothing and says how long until there will be one.
func (l *Limiter) Allow(key string) (ok bool, retryAfter time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.bucket(key, now)
	b.seen = now
	r := b.lim.ReserveN(now, 1)
	if !r.OK() { // cannot happen with burst >= 1; refuse rather than wait forever
		return false, time.Second
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// Len is the number of buckets kept.
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

// bucket returns key's bucket, making one (and sweeping) if needed. l.mu
// is held.
func (l *Limiter) bucket(key string, now time.Time) *bucket {
	if b, ok := l.buckets[key]; ok {
		return b
	}
	if now.Sub(l.lastSweep) >= l.idleAfter || len(l.buckets) >= l.maxKeys {
		l.sweep(now)
	}
	for k := range l.buckets { // still full: nothing idle, drop any one
		if len(l.buckets) < l.maxKeys {
			break
		}
		delete(l.buckets, k)
	}
	b := &bucket{lim: rate.NewLimiter(l.limit, l.burst)}
	l.buckets[strings.Clone(key)] = b // kept past the request: never a view of Fiber's buffers
	return b
}

// sweep forgets the buckets idle for IdleAfter. l.mu is held.
func (l *Limiter) sweep(now time.Time) {
	for k, b := range l.buckets {
		if now.Sub(b.seen) >= l.idleAfter {
			delete(l.buckets, k)
		}
	}
	l.lastSweep = now
}

// Middleware limits requests by key(c); a request with an empty key passes
// (mount it after the auth middleware that sets the key). A limited request
// is answered 429 rate_limited with Retry-After in whole seconds, at least
// 1, before any later handler (an idempotency claim included) runs.
func (l *Limiter) Middleware(key func(c *fiber.Ctx) string) fiber.Handler {
	return Middleware(l, key)
}

// Middleware is Limiter.Middleware for any Taker (a Shared limiter).
func Middleware(t Taker, key func(c *fiber.Ctx) string) fiber.Handler {
	return func(c *fiber.Ctx) error {
		k := key(c)
		if k == "" {
			return c.Next()
		}
		ok, wait := t.Take(c.UserContext(), k)
		if ok {
			return c.Next()
		}
		return problem.New(fiber.StatusTooManyRequests, "rate_limited",
			"too many requests for this merchant; retry after the Retry-After interval").
			WithRetryAfter(RetryAfterSeconds(wait))
	}
}

// RetryAfterSeconds rounds a wait up to whole seconds, at least 1, as the
// Retry-After header needs.
func RetryAfterSeconds(d time.Duration) int {
	s := int(math.Ceil(d.Seconds()))
	return max(s, 1)
}
