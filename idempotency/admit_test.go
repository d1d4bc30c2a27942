package idempotency_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/idempotency"
)

// With Config.Admit, a new request waits at the door while the admitted
// ones' held claims are unsent, and goes in as soon as one of them
// persists (or releases) it — not when its request ends: the
// provider call that follows a persisted claim holds no place, so a slow
// provider never limits how many charges are in flight.
func TestMiddlewareAdmitQueuesOnlyBeforeTheClaimIsDurable(t *testing.T) {
	t.Parallel()
	db := dbtest.Postgres(t)
	s, _ := newStore(t, db)
	entered := make(chan string, 4)
	persist := map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{}), "c": make(chan struct{})}
	persisted := make(chan string, 4)
	finish := make(chan struct{})

	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Post("/v1/things", idempotency.Middleware(idempotency.Config{
		Store: s, Lease: lease, Admit: 1, Hold: true,
		Scope: func(*fiber.Ctx) string { return "m_admit" },
	}), func(c *fiber.Ctx) error {
		ctx := context.Background()
		claim, ok := idempotency.ClaimFrom(c)
		if !ok {
			return fiber.ErrInternalServerError
		}
		body := string(c.Body())
		entered <- body
		<-persist[body]
		if body == "c" {
			// A release (a validation error) gives the place back too.
			if err := s.Release(ctx, claim); err != nil {
				return err
			}
			return c.SendStatus(fiber.StatusBadRequest)
		}
		if err := s.Persist(ctx, claim, nil); err != nil {
			return err
		}
		persisted <- body
		<-finish // the provider call: no place held
		if err := s.Complete(ctx, nil, claim, idempotency.Response{Status: 201, Body: []byte(body)}); err != nil {
			return err
		}
		return c.Status(201).SendString(body)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = app.Listener(ln) }()
	t.Cleanup(func() { _ = app.ShutdownWithTimeout(5 * time.Second) })
	client := &http.Client{Timeout: 30 * time.Second}
	answers := make(chan string, 4)
	post := func(key, body string) {
		go func() {
			req, _ := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/v1/things", bytes.NewBufferString(body))
			req.Header.Set("Idempotency-Key", key)
			resp, err := client.Do(req)
			if err != nil {
				answers <- body + ": " + err.Error()
				return
			}
			resp.Body.Close()
			answers <- fmt.Sprintf("%s: %d", body, resp.StatusCode)
		}()
	}
	waitFor := func(ch chan string, want string) {
		t.Helper()
		select {
		case got := <-ch:
			require.Equal(t, want, got)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s never came", want)
		}
	}
	nothingFrom := func(ch chan string, what string) {
		t.Helper()
		select {
		case got := <-ch:
			t.Fatalf("%s: %s went in while the only place was taken", what, got)
		case <-time.After(300 * time.Millisecond):
		}
	}

	post("k-a", "a")
	waitFor(entered, "a")
	post("k-c", "c")
	nothingFrom(entered, "before a's claim is durable")
	close(persist["a"])
	waitFor(persisted, "a")
	// a is now "at the provider", its request still open: c goes in.
	waitFor(entered, "c")
	post("k-b", "b")
	nothingFrom(entered, "before c's claim is released")
	close(persist["c"])
	waitFor(answers, "c: 400")
	waitFor(entered, "b")
	close(persist["b"])
	waitFor(persisted, "b")
	close(finish)
	got := map[string]bool{}
	for range 2 {
		select {
		case a := <-answers:
			got[a] = true
		case <-time.After(10 * time.Second):
			t.Fatal("a and b never answered")
		}
	}
	require.Equal(t, map[string]bool{"a: 201": true, "b: 201": true}, got)
}

// A request whose deadline passes while it waits at the door is answered
// 503 with Retry-After, having read and written nothing, and the door's
// place it never got is not given back twice.
func TestMiddlewareAdmitGivesUpAtTheRequestsDeadline(t *testing.T) {
	t.Parallel()
	db := dbtest.Postgres(t)
	s, _ := newStore(t, db)
	entered, release := make(chan struct{}, 1), make(chan struct{})
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Post("/v1/things", func(c *fiber.Ctx) error {
		// Only the request meant to give up has the short deadline: the
		// others must not race it on a loaded machine.
		if c.Get("X-Test-Deadline") == "" {
			return c.Next()
		}
		ctx, cancel := context.WithTimeout(c.UserContext(), 300*time.Millisecond)
		defer cancel()
		c.SetUserContext(ctx)
		return c.Next()
	}, idempotency.Middleware(idempotency.Config{
		Store: s, Lease: lease, Admit: 1, Hold: true,
		Scope: func(*fiber.Ctx) string { return "m_door" },
	}), func(c *fiber.Ctx) error {
		claim, _ := idempotency.ClaimFrom(c)
		if string(c.Body()) == "hold" {
			entered <- struct{}{}
			<-release
		}
		if err := s.Persist(context.Background(), claim, nil); err != nil {
			return err
		}
		if err := s.Complete(context.Background(), nil, claim, idempotency.Response{Status: 201, Body: c.Body()}); err != nil {
			return err
		}
		return c.Status(201).Send(c.Body())
	})
	post := func(key, body string, deadline bool) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, "http://example.com/v1/things", bytes.NewBufferString(body))
		req.Header.Set("Idempotency-Key", key)
		if deadline {
			req.Header.Set("X-Test-Deadline", "300ms")
		}
		resp, err := app.Test(req, 10_000)
		require.NoError(t, err)
		return resp
	}
	held := make(chan *http.Response, 1)
	go func() { held <- post("k-hold", "hold", false) }()
	<-entered
	r := post("k-late", "late", true)
	require.Equal(t, http.StatusServiceUnavailable, r.StatusCode)
	require.Equal(t, "1", r.Header.Get("Retry-After"))
	_, err := s.Get(context.Background(), "m_door", "k-late")
	require.ErrorIs(t, err, idempotency.ErrNotFound, "nothing written for it")
	close(release)
	require.Equal(t, http.StatusCreated, (<-held).StatusCode)
	require.Equal(t, http.StatusCreated, post("k-late", "late", false).StatusCode, "the door is free again, once")
}
