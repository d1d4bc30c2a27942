package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/valyala/fasthttp"

	"github.com/oncepay/gateway/bench/internal/rig"
)

// recovery is one measurement of the sweeper after an outage.
type recovery struct {
	n                int
	settled          time.Duration // from the gateway's start until no payment is processing
	settledIn60s     int           // settled one minute after the start (when it took longer)
	succeeded, keys  int           // payments succeeded, keys done
	charges, charged int           // simulator charge rows before and after the sweep
	timedOut         bool
}

// measureRecovery leaves n payments processing — charged at the simulator,
// the answer lost (sim_timeout), their keys' leases lapsed and their last
// attempt an hour ago, as after an outage nobody retried — then starts a
// gateway whose simulator answers every lookup after latency and times how
// long until its sweeper has settled them all. It checks that each was
// charged once: the sweeper only looks up.
func measureRecovery(ctx context.Context, o options, n int) (rec recovery, err error) {
	rec.n = n
	db, err := rig.CreateDatabase(ctx, o.db, "oncepay_bench_rec")
	if err != nil {
		return rec, err
	}
	defer func() { _ = db.Drop(context.Background()) }()
	dir, err := os.MkdirTemp("", "oncepay-bench-rec-")
	if err != nil {
		return rec, err
	}
	defer os.RemoveAll(dir)
	addr, err := rig.FreeAddr()
	if err != nil {
		return rec, err
	}
	env := rig.GatewayEnv(db.URL, dir)
	env["GATEWAY_ADDR"] = addr
	env["LOG_LEVEL"] = "error"
	env["DATABASE_MAX_CONNS"] = strconv.Itoa(o.conns)
	logf, err := os.Create(filepath.Join(dir, "gateway.log"))
	if err != nil {
		return rec, err
	}
	defer logf.Close()
	base := "http://" + addr
	gw := &rig.Process{Bin: o.gateway, Args: []string{"serve"}, Env: env, Health: base + "/healthz", Log: logf}
	if err := gw.Start(); err != nil {
		return rec, err
	}
	defer gw.Stop()
	m, err := rig.Onboard(ctx, rig.Client(30*time.Second), base, map[string]any{"name": "Recovery Merchant", "default_provider": "simulator"})
	if err != nil {
		return rec, err
	}
	d := &driver{hc: &fasthttp.HostClient{Addr: addr, MaxConns: 64, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second},
		base: base, m: m, clients: 32, gatewayPid: gw.Pid()}
	body := d.body("sim_timeout")
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	statuses := make(chan int, n)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				s, _, _ := d.pay(fmt.Sprintf("rec-%d", i), body)
				statuses <- s
			}
		}()
	}
	wg.Wait()
	close(statuses)
	got := map[int]int{}
	for s := range statuses {
		got[s]++
	}
	if got[http.StatusAccepted] != n {
		return rec, fmt.Errorf("recovery: seeding %d stuck payments: answers %v", n, got)
	}
	gw.Stop()

	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		return rec, err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `UPDATE idempotency_keys SET locked_until = now() - interval '1 second',
  attempted_at = now() - interval '1 hour' WHERE status = 'in_progress'`); err != nil {
		return rec, err
	}
	count := func(q string) int {
		var k int
		if err := conn.QueryRow(ctx, q).Scan(&k); err != nil {
			return -1
		}
		return k
	}
	rec.charges = count("SELECT count(*) FROM simulator_charges")
	if p := count("SELECT count(*) FROM payments WHERE status = 'processing'"); p != n {
		return rec, fmt.Errorf("recovery: %d payments processing after seeding, want %d", p, n)
	}

	if err := db.Analyze(ctx); err != nil {
		return rec, err
	}
	gw.Env = maps(env, map[string]string{"SIMULATOR_LATENCY": o.recoveryLatency.String(), "SWEEP_INTERVAL": "500ms"})
	if err := gw.Start(); err != nil {
		return rec, err
	}
	start := time.Now()
	limit := start.Add(o.recoveryLimit)
	for {
		left := count("SELECT count(*) FROM payments WHERE status = 'processing'")
		now := time.Now()
		if rec.settledIn60s == 0 && now.Sub(start) >= time.Minute {
			rec.settledIn60s = n - left
		}
		if left == 0 {
			rec.settled = now.Sub(start)
			break
		}
		if now.After(limit) {
			rec.timedOut, rec.settled = true, now.Sub(start)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	gw.Stop()
	rec.succeeded = count("SELECT count(*) FROM payments WHERE status = 'succeeded'")
	rec.keys = count("SELECT count(*) FROM idempotency_keys WHERE status = 'done'")
	rec.charged = count("SELECT count(*) FROM simulator_charges")
	fmt.Fprintf(os.Stderr, "bench: recovery of %d stuck payments: %.1f s (%d succeeded, %d charges)\n", n, rec.settled.Seconds(), rec.succeeded, rec.charged)
	return rec, nil
}

func maps(a, b map[string]string) map[string]string {
	out := make(map[string]string, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func renderRecovery(b *strings.Builder, o options, recs []recovery) {
	if len(recs) == 0 {
		return
	}
	fmt.Fprintf(b, "\nRecovery after an outage: N payments charged at the simulator but left processing (answer lost, nobody retried, leases lapsed), then a gateway with SIMULATOR_LATENCY=%s (every lookup) and SWEEP_INTERVAL=500ms, default SWEEP_CONCURRENCY and SWEEP_PROVIDER_RATE; time from its start until no payment is processing (the first sweep starts 0.5 s in):\n\n", o.recoveryLatency)
	b.WriteString("| stuck payments | settled in | keys/s | succeeded | keys done | simulator charges before → after |\n|---:|---:|---:|---:|---:|---|\n")
	for _, r := range recs {
		took := fmt.Sprintf("%.1f s", r.settled.Seconds())
		if r.timedOut {
			took = fmt.Sprintf("not in %.0f s", r.settled.Seconds())
		}
		fmt.Fprintf(b, "| %d | %s | %.0f | %d | %d | %d → %d |\n", r.n, took, float64(r.n)/r.settled.Seconds(), r.succeeded, r.keys, r.charges, r.charged)
	}
	b.WriteString("\nOne charge each: the charges are the simulator's rows (one per reference), the same count before and after the sweep, which only looks up.\n")
}
