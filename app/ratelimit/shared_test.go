package ratelimit

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// redisURL is the Redis the tests use for real (TEST_REDIS_URL; .ci/run
// starts one on this default when it is down).
func redisURL() string {
	if u := os.Getenv("TEST_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// prefix is a key prefix of the test's own, so tests sharing a Redis never
// share a bucket.
func prefix(t *testing.T) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "test-" + strings.ReplaceAll(t.Name(), "/", "-") + "-" + hex.EncodeToString(b) + ":"
}

func newShared(t *testing.T, url, prefix string, rate float64, burst int, opts ...func(*SharedConfig)) *Shared {
	t.Helper()
	cfg := SharedConfig{URL: url, KeyPrefix: prefix, Local: New(Config{Rate: rate, Burst: burst})}
	for _, o := range opts {
		o(&cfg)
	}
	s, err := NewShared(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	if url == redisURL() {
		require.NoError(t, s.Ping(context.Background()), "Redis at %s must answer (bash .ci/run starts it)", url)
	}
	return s
}

// TestSharedIsOneBucketAcrossInstances: two instances' limiters on one
// Redis, asked in turn, admit one burst between them, not one each; a
// merchant's bucket is not another's, and another prefix is another set.
func TestSharedIsOneBucketAcrossInstances(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := prefix(t)
	a, b := newShared(t, redisURL(), p, 1, 5), newShared(t, redisURL(), p, 1, 5)
	admitted, wait := takeInTurn(ctx, a, b, "ten_1", 20)
	require.Equal(t, 5, admitted, "one burst across both instances (at 1/s nothing refills meanwhile)")
	require.Greater(t, wait, time.Duration(0))
	require.LessOrEqual(t, wait, time.Second)
	require.False(t, a.Down())

	ok, _ := a.Take(ctx, "ten_2")
	require.True(t, ok, "another merchant has its own bucket")
	other := newShared(t, redisURL(), prefix(t), 1, 5)
	ok, _ = other.Take(ctx, "ten_1")
	require.True(t, ok, "another prefix is another set of buckets")
}

// TestSharedFallsBackToMemoryWhileRedisIsDown: a Redis that does not
// answer never refuses a request for that reason: the local limiter
// decides (with the same rate and burst), Redis is asked again only once
// per RetryEvery, the metrics hooks hear of it, and the warning is logged
// once, not per request.
func TestSharedFallsBackToMemoryWhileRedisIsDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, o := downShared(t)
	start := time.Now()
	admitted := 0
	for range 50 {
		if ok, _ := s.Take(ctx, "ten_1"); ok {
			admitted++
		}
	}
	require.Less(t, time.Since(start), 2*time.Second, "one failed call, then no more waiting on Redis")
	require.Equal(t, 3, admitted, "the local bucket: burst 3")
	require.True(t, s.Down())
	o.mu.Lock()
	require.Equal(t, 50, o.decisions[BackendMemory])
	require.Zero(t, o.decisions[BackendRedis])
	require.Equal(t, []bool{false}, o.up, "Redis was asked once in the hour")
	o.mu.Unlock()
	require.Equal(t, 1, strings.Count(o.logs.String(), "Redis unreachable"), o.logs.String())
	require.Regexp(t, `err=(timeout|"dial tcp)`, o.logs.String())
	require.Error(t, s.Ping(ctx))
}

// TestSharedRecoversWhenRedisAnswers: after RetryEvery the next request
// asks Redis again and, once it answers, limits are shared again.
func TestSharedRecoversWhenRedisAnswers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var logs syncBuffer
	s := newShared(t, redisURL(), prefix(t), 100, 10, func(c *SharedConfig) {
		c.Log = slog.New(slog.NewTextHandler(&logs, nil))
		c.RetryEvery = 50 * time.Millisecond
	})
	s.failed(context.DeadlineExceeded) // as if a call had timed out
	require.True(t, s.Down())
	ok, _ := s.Take(ctx, "ten_1")
	require.True(t, ok)
	require.True(t, s.Down(), "within RetryEvery the local limiter decides")
	time.Sleep(60 * time.Millisecond)
	ok, _ = s.Take(ctx, "ten_1")
	require.True(t, ok)
	require.False(t, s.Down())
	require.Contains(t, logs.String(), "Redis answers again")
}

func TestGCRALimitKeepsFractionalRates(t *testing.T) {
	t.Parallel()
	l := gcraLimit(5, 5)
	require.Equal(t, 5, l.Rate)
	require.Equal(t, time.Second, l.Period)
	l = gcraLimit(0.5, 1)
	require.Equal(t, 2*time.Second, time.Duration(float64(l.Period)/float64(l.Rate)), "one every 2 s")
	require.Equal(t, 1, l.Burst)
}

func TestNewSharedRefusesABadURLWithoutQuotingIt(t *testing.T) {
	t.Parallel()
	_, err := NewShared(SharedConfig{URL: "http://user:hunter2@example/0", Local: New(Config{Rate: 1})})
	require.Error(t, err)
	require.NotContains(t, err.Error(), "hunter2")
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestSharedFallsBackWhenRedisHangs: a Redis that takes the connection
// and never answers (a hung server, a black-holed network) is the same as
// one that refuses it: one call waits out CallTimeout, the local limiter
// decides that request and every other until RetryEvery, and no request
// is refused because of it.
func TestSharedFallsBackWhenRedisHangs(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	// Cleanups run last first: the client closes its connections, then
	// the listener closes and its accept loop returns (so nothing adds to
	// held while held is waited on), then the held connections drain.
	var held sync.WaitGroup
	t.Cleanup(held.Wait)
	accepting := make(chan struct{})
	t.Cleanup(func() { _ = ln.Close(); <-accepting })
	go func() {
		defer close(accepting)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held.Go(func() { _, _ = io.Copy(io.Discard, c); _ = c.Close() }) // read everything, answer nothing
		}
	}()
	ctx := context.Background()
	var logs syncBuffer
	var mu sync.Mutex
	decisions := map[string]int{}
	s := newShared(t, "redis://"+ln.Addr().String()+"/0", prefix(t), 1, 3, func(c *SharedConfig) {
		c.Log = slog.New(slog.NewTextHandler(&logs, nil))
		c.RetryEvery = time.Hour
		c.Observe = func(l, b string) { mu.Lock(); decisions[b]++; decisions[l+"/"+b]++; mu.Unlock() }
	})
	t.Cleanup(func() { _ = s.Close() })
	admitted := 0
	for range 50 {
		if ok, _ := s.Take(ctx, "ten_1"); ok {
			admitted++
		}
	}
	require.Equal(t, 3, admitted, "the local bucket: burst 3")
	require.True(t, s.Down())
	mu.Lock()
	require.Equal(t, 50, decisions[BackendMemory])
	mu.Unlock()
	require.Equal(t, 1, strings.Count(logs.String(), "Redis unreachable"), logs.String())
}

// TestSiblingIsOneBucketAcrossInstancesApartFromItsParent: a second limit
// over the same client (the webhook lookups beside the merchant limit) is
// one bucket across instances too, at its own rate and burst, and a key of
// it never shares a bucket with the same key of the other namespace.
func TestSiblingIsOneBucketAcrossInstancesApartFromItsParent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := prefix(t)
	a, b := newShared(t, redisURL(), p, 1, 20), newShared(t, redisURL(), p, 1, 20)
	slow := func() *Limiter { return New(Config{Rate: 1.0 / 30, Burst: 3}) }
	ha, hb := a.Sibling("hooklookup", slow()), b.Sibling("hooklookup", slow())
	admitted, wait := takeInTurn(ctx, ha, hb, "ten_1/pay_1", 12)
	require.Equal(t, 3, admitted, "one burst of the sibling's across both instances")
	require.Greater(t, wait, 20*time.Second, "the sibling's rate (one every 30 s), not its parent's")
	require.LessOrEqual(t, wait, 31*time.Second)

	for range 10 {
		ok, _ := a.Take(ctx, "ten_1/pay_1")
		require.True(t, ok, "the parent's bucket of the same key is its own")
	}
	for range 20 {
		a.Take(ctx, "ten_2")
	}
	ok, _ := a.Take(ctx, "ten_2")
	require.False(t, ok, "the parent's bucket is spent")
	ok, _ = ha.Take(ctx, "ten_2")
	require.True(t, ok, "the sibling's bucket of the same key is its own")

	require.NoError(t, ha.Close())
	require.NoError(t, a.Close(), "the client is closed once, whichever closes it")
	require.Error(t, a.Ping(ctx))
}

// TestSiblingSharesItsParentsOutage: while Redis does not answer, a
// sibling does not ask it again either; one warning, one Up(false).
func TestSiblingSharesItsParentsOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, o := downShared(t)
	h := s.Sibling("hooklookup", New(Config{Rate: 1, Burst: 2}))
	admitted := 0
	for range 10 {
		if ok, _ := s.Take(ctx, "k"); ok {
			admitted++
		}
		if ok, _ := h.Take(ctx, "k"); ok {
			admitted++
		}
	}
	require.Equal(t, 3+2, admitted, "each limit's own local bucket")
	require.True(t, h.Down())
	o.mu.Lock()
	require.Equal(t, 20, o.decisions[BackendMemory])
	require.Equal(t, 10, o.decisions["ratelimit/"+BackendMemory], "each decision named by its limit")
	require.Equal(t, 10, o.decisions["hooklookup/"+BackendMemory])
	require.Equal(t, []bool{false}, o.up, "Redis was asked once in the hour, by either")
	o.mu.Unlock()
	require.Equal(t, 1, strings.Count(o.logs.String(), "Redis unreachable"), o.logs.String())
	require.Panics(t, func() { s.Sibling("a:b", New(Config{Rate: 1})) }, "a colon would let namespaces share keys")
}

// takeInTurn asks a and b in turn, n times in all, for key: how many were
// admitted, and the last refusal's wait.
func takeInTurn(ctx context.Context, a, b *Shared, key string, n int) (admitted int, wait time.Duration) {
	for i := range n {
		in := a
		if i%2 == 1 {
			in = b
		}
		if ok, w := in.Take(ctx, key); ok {
			admitted++
		} else {
			wait = w
		}
	}
	return admitted, wait
}

// outage is what a Shared on a Redis that never answers told its log and
// its metrics hooks: decisions by backend, and by limit/backend.
type outage struct {
	logs      syncBuffer
	mu        sync.Mutex
	decisions map[string]int
	up        []bool
}

// downShared is a Shared (rate 1, burst 3) on a Redis that never answers,
// asked again only after an hour.
func downShared(t *testing.T) (*Shared, *outage) {
	t.Helper()
	o := &outage{decisions: map[string]int{}}
	s := newShared(t, "redis://127.0.0.1:1/0", prefix(t), 1, 3, func(c *SharedConfig) {
		c.Log = slog.New(slog.NewTextHandler(&o.logs, nil))
		c.RetryEvery = time.Hour
		c.Observe = func(l, b string) { o.mu.Lock(); o.decisions[b]++; o.decisions[l+"/"+b]++; o.mu.Unlock() }
		c.Up = func(u bool) { o.mu.Lock(); o.up = append(o.up, u); o.mu.Unlock() }
	})
	return s, o
}
