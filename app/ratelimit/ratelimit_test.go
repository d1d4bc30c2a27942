package ratelimit

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type clock struct{ now time.Time }

func (c *clock) Now() time.Time          { return c.now }
func (c *clock) Advance(d time.Duration) { c.now = c.now.Add(d) }

func newLimiter(cfg Config) (*Limiter, *clock) {
	c := &clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	cfg.Now = c.Now
	return New(cfg), c
}

func TestBurstThenRate(t *testing.T) {
	t.Parallel()
	l, c := newLimiter(Config{Rate: 1, Burst: 2})
	for i := range 2 {
		ok, _ := l.Allow("m")
		require.True(t, ok, "request %d is within the burst", i)
	}
	ok, wait := l.Allow("m")
	require.False(t, ok)
	require.Equal(t, time.Second, wait)
	require.Equal(t, 1, RetryAfterSeconds(wait))

	c.Advance(500 * time.Millisecond)
	ok, wait = l.Allow("m")
	require.False(t, ok, "a refused request takes no token")
	require.Equal(t, 500*time.Millisecond, wait)
	require.Equal(t, 1, RetryAfterSeconds(wait), "Retry-After is at least 1")

	c.Advance(500 * time.Millisecond)
	ok, _ = l.Allow("m")
	require.True(t, ok)
}

func TestKeysAreIndependent(t *testing.T) {
	t.Parallel()
	l, _ := newLimiter(Config{Rate: 1, Burst: 1})
	ok, _ := l.Allow("a")
	require.True(t, ok)
	ok, _ = l.Allow("a")
	require.False(t, ok)
	ok, _ = l.Allow("b")
	require.True(t, ok)
}

func TestSlowRateRetryAfterRoundsUp(t *testing.T) {
	t.Parallel()
	l, _ := newLimiter(Config{Rate: 0.1, Burst: 1})
	ok, _ := l.Allow("m")
	require.True(t, ok)
	ok, wait := l.Allow("m")
	require.False(t, ok)
	require.Equal(t, 10, RetryAfterSeconds(wait))
}

func TestZeroBurstStillAdmits(t *testing.T) {
	t.Parallel()
	l, _ := newLimiter(Config{Rate: 5, Burst: 0})
	ok, _ := l.Allow("m")
	require.True(t, ok)
}

func TestIdleBucketsAreForgotten(t *testing.T) {
	t.Parallel()
	l, c := newLimiter(Config{Rate: 1, Burst: 2, IdleAfter: time.Minute})
	for i := range 10 {
		l.Allow(fmt.Sprint("m", i))
	}
	require.Equal(t, 10, l.Len())
	c.Advance(30 * time.Second)
	l.Allow("m0") // still in use
	c.Advance(40 * time.Second)
	l.Allow("new") // a new key past IdleAfter sweeps
	require.Equal(t, 2, l.Len(), "m0 and new remain")
}

func TestDefaultIdleAfterIsAFullRefill(t *testing.T) {
	t.Parallel()
	l, _ := newLimiter(Config{Rate: 0.01, Burst: 10})
	require.Equal(t, 1000*time.Second, l.idleAfter)
	l, _ = newLimiter(Config{Rate: 100, Burst: 200})
	require.Equal(t, minIdleAfter, l.idleAfter)
}

func TestMaxKeysBoundsMemory(t *testing.T) {
	t.Parallel()
	l, _ := newLimiter(Config{Rate: 1, Burst: 1, MaxKeys: 3})
	for i := range 100 {
		l.Allow(fmt.Sprint("m", i))
		require.LessOrEqual(t, l.Len(), 3)
	}
	ok, _ := l.Allow("m99")
	require.False(t, ok, "the newest key is kept")
}
