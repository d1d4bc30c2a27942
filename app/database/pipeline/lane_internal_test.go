package pipeline

import (
	"cmp"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// A call whose caller left before its batch was claimed is answered once
// and left out of everything the lane does with the batch after: here the
// batch is refused by pgx before it is sent (an argument it cannot encode)
// and goes again statement by statement. The lane used to keep its own,
// unfiltered batch — the left call in it again, or another call twice —
// and closed an answered call's channel again: a panic that killed the
// process (or, on a resend, a lock taken twice: a lane hung for ever).
func TestACallerThatLeftIsLeftOutOfItsBatch(t *testing.T) {
	t.Parallel()
	cfg, err := pgx.ParseConfig(cmp.Or(os.Getenv("TEST_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"))
	if err != nil {
		t.Fatal(err)
	}
	p := New(cfg, Options{Conns: 1})
	t.Cleanup(p.Close)
	busy := make(chan error, 1)
	go func() { _, err := p.DB().Exec(`SELECT pg_sleep(0.4)`); busy <- err }()
	time.Sleep(100 * time.Millisecond) // the lane is sending the sleep

	newCall := func(sql string, args ...any) *call {
		return &call{sql: sql, args: args, done: make(chan struct{})}
	}
	unsendable := newCall(`SELECT $1::int4`, int64(1)<<40)
	gone := newCall(`SELECT 2`)
	gone.left = true // its caller's context ended while it waited
	ordinary := newCall(`SELECT 3`)
	for _, c := range []*call{unsendable, gone, ordinary} {
		go func() { p.queue <- c }()
	}
	if err := <-busy; err != nil {
		t.Fatal(err)
	}
	for _, c := range []*call{unsendable, gone, ordinary} {
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: never answered", c.sql)
		}
	}
	if unsendable.res.err == nil {
		t.Error("an argument pgx cannot encode was sent")
	}
	if !errors.Is(gone.res.err, errLeft) {
		t.Errorf("the call whose caller left: %v, want errLeft", gone.res.err)
	}
	if ordinary.res.err != nil || len(ordinary.res.rows) != 1 {
		t.Errorf("the ordinary call: %v, %d rows", ordinary.res.err, len(ordinary.res.rows))
	}
}
