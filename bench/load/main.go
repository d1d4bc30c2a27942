// Command load is the gateway's load benchmark (`make bench`).
//
// It creates a throwaway PostgreSQL database, starts the real gateway
// binary on it (simulator provider at zero latency, no rate limit), drives
// it over loopback HTTP with concurrent clients through four scenarios —
// new payments, replays of one key, a storm of clients on the same new key,
// and a mix — and then runs pgbench, on a database of the same schema, with
// the SQL a new payment executes, so the report can say what fraction of
// PostgreSQL's own ceiling on this machine the gateway reaches. A slow-provider scenario
// (slow.go: the simulator at 1 s per charge, 400 then 2,000 closed-loop
// clients) follows, then the sweeper's recovery. The report goes to stdout
// and to <out>/<date>.md. It measures; it never fails on a number.
//
//	load -gateway bin/gateway [-db URL] [-duration 10s] [-clients 32] [-out bench/results]
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/oncepay/gateway/bench/internal/rig"
	"github.com/oncepay/gateway/config"
)

func main() {
	var o options
	flag.StringVar(&o.gateway, "gateway", "bin/gateway", "gateway binary to run")
	flag.StringVar(&o.db, "db", envOr("TEST_DATABASE_URL", rig.DefaultDatabaseURL), "PostgreSQL to create the bench database on")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "length of each scenario")
	flag.IntVar(&o.clients, "clients", 32, "concurrent HTTP clients")
	flag.IntVar(&o.conns, "conns", config.DefaultMaxConns(), "gateway pool size (DATABASE_MAX_CONNS) and pgbench connections")
	flag.StringVar(&o.scenarios, "scenarios", "new,replay,storm,mix", "scenarios to run, in order")
	flag.StringVar(&o.out, "out", "bench/results", "directory for <date>.md (empty: stdout only)")
	flag.StringVar(&o.pgbench, "pgbench", "", "pgbench binary (default: PATH, then /usr/lib/postgresql/*/bin)")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds in which new payments and pgbench alternate; the report gives medians")
	flag.StringVar(&o.seedpeer, "seedpeer", "bin/seedpeer", "the seed's bare handler (bench/seedpeer), measured beside the gateway in every round (empty: left out)")
	flag.StringVar(&o.recovery, "recovery", "2000,10000", "stuck payments for each recovery measurement (empty: none)")
	flag.DurationVar(&o.recoveryLatency, "recovery-latency", 100*time.Millisecond, "simulator latency of each lookup during recovery")
	flag.DurationVar(&o.recoveryLimit, "recovery-limit", 5*time.Minute, "give up a recovery measurement after this long")
	flag.BoolVar(&o.slow, "slow", true, "run the slow-provider scenario (issue 17; -slow=false skips it)")
	flag.DurationVar(&o.slowLatency, "slow-latency", time.Second, "simulator latency of every charge in the slow-provider scenario")
	flag.IntVar(&o.slowClients, "slow-clients", 400, "closed-loop clients of each slow-provider round")
	flag.IntVar(&o.slowWide, "slow-wide", 2000, "clients of the slow-provider run that checks the gateway holds up (0: none)")
	flag.DurationVar(&o.slowDuration, "slow-duration", 12*time.Second, "length of each slow-provider run")
	flag.DurationVar(&o.slowTimeout, "slow-timeout", 30*time.Second, "client timeout in the slow-provider scenario")
	flag.StringVar(&o.slowBaseline, "slow-baseline", "", "another gateway binary (the one before a change) measured beside -gateway in every slow-provider round")
	flag.StringVar(&o.slowEnv, "slow-env", "", "K=V,… added to -gateway's environment in the slow-provider scenario (an experiment: DATABASE_MAX_CONNS=32)")
	flag.StringVar(&o.slowBaselineEnv, "slow-baseline-env", "", "K=V,… added to -slow-baseline's environment")
	flag.Parse()
	rig.CatchInterrupts()
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		rig.Exit(1)
	}
	rig.Exit(0)
}

type options struct {
	gateway, db, scenarios, out, pgbench string
	seedpeer, recovery, slowBaseline     string
	slowEnv, slowBaselineEnv             string
	slow                                 bool
	slowLatency, slowDuration            time.Duration
	slowTimeout                          time.Duration
	slowClients, slowWide                int
	duration                             time.Duration
	recoveryLatency, recoveryLimit       time.Duration
	clients, conns, rounds               int
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// result is one scenario's measurements.
type result struct {
	name, what string
	elapsed    time.Duration
	latencies  []time.Duration
	statuses   map[int]int // HTTP status → count; 0 counts transport errors
	replayed   int         // answers with Idempotent-Replayed: true
	cpu        cpuUse
}

func (r result) rate() float64 { return float64(len(r.latencies)) / r.elapsed.Seconds() }

func (r result) pct(p float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	i := int(float64(len(r.latencies)-1) * p)
	return r.latencies[i]
}

func run(ctx context.Context, o options) error {
	db, err := rig.CreateDatabase(ctx, o.db, "oncepay_bench")
	if err != nil {
		return err
	}
	defer func() {
		if err := db.Drop(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "bench: drop database:", err)
		}
	}()
	dir, err := os.MkdirTemp("", "oncepay-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	addr, err := rig.FreeAddr()
	if err != nil {
		return err
	}
	env := rig.GatewayEnv(db.URL, dir)
	env["GATEWAY_ADDR"] = addr
	env["DATABASE_MAX_CONNS"] = strconv.Itoa(o.conns)
	env["LOG_LEVEL"] = "error" // an access log line per request would be measured too
	logf, err := os.Create(filepath.Join(dir, "gateway.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	base := "http://" + addr
	gw := &rig.Process{Bin: o.gateway, Args: []string{"serve"}, Env: env, Health: base + "/healthz", Log: logf}
	if err := gw.Start(); err != nil {
		return err
	}
	defer gw.Stop()

	c := rig.Client(30 * time.Second)
	m, err := rig.Onboard(ctx, c, base, map[string]any{"name": "Bench Merchant", "default_provider": "simulator"})
	if err != nil {
		return err
	}
	hc := &fasthttp.HostClient{
		Addr: addr, MaxConns: 2 * o.clients, MaxIdleConnDuration: time.Minute,
		ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
	}
	d := &driver{hc: hc, base: base, m: m, clients: o.clients, duration: o.duration, gatewayPid: gw.Pid()}
	// Warm up pools, caches and the JIT-free but lazy parts (prepared
	// statements, TLS-free keep-alive connections) before measuring.
	d.measure("warmup", "", d.newPayment("sim_success"), min(2*time.Second, o.duration))

	// The seed's bare handler on the same database, measured in the same
	// rounds, so that every report has the ratio from runs seconds apart.
	var sd *driver
	if o.seedpeer != "" {
		saddr, err := rig.FreeAddr()
		if err != nil {
			return err
		}
		peer := &rig.Process{Bin: o.seedpeer, Args: []string{"-addr", saddr, "-db", db.URL}, Health: "http://" + saddr + "/healthz", Log: logf}
		if err := peer.Start(); err != nil {
			return err
		}
		defer peer.Stop()
		sd = &driver{hc: &fasthttp.HostClient{Addr: saddr, MaxConns: 2 * o.clients, MaxIdleConnDuration: time.Minute,
			ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second},
			base: "http://" + saddr, m: rig.Merchant{ID: "ten_seedpeer"}, seed: true,
			clients: o.clients, duration: o.duration, gatewayPid: peer.Pid()}
		sd.measure("warmup", "", sd.newPayment("sim_success"), min(2*time.Second, o.duration))
	}
	if err := db.Analyze(ctx); err != nil {
		return err
	}

	pgb := findPgbench(o.pgbench)
	if pgb == "" {
		fmt.Fprintln(os.Stderr, "bench: pgbench not found; the PostgreSQL ceiling is left out")
	}
	var results []result
	var rounds []round
	var replays []replayRound
	for _, name := range strings.Split(o.scenarios, ",") {
		var r result
		if strings.TrimSpace(name) == "" {
			continue
		}
		switch strings.TrimSpace(name) {
		case "new":
			// This machine's speed drifts by ±20% within minutes (shared
			// cores, fsync latency), so one gateway run against one pgbench
			// run a minute later can say anything. New payments and the
			// ceiling alternate instead, each round's ratio is taken from
			// runs seconds apart, and the report gives the medians.
			for i := range max(1, o.rounds) {
				before, _ := scrapePool(d.hc, d.base)
				rd := round{new: d.measure("new", "a new key per request (sim_success): claim, ledger row, charge, completion", d.newPayment("sim_success"), o.duration)}
				after, _ := scrapePool(d.hc, d.base)
				rd.pool = after.sub(before)
				fmt.Fprintf(os.Stderr, "bench: round %d: new %8.0f req/s  p50 %v  p99 %v  statements per round trip %s\n", i+1, rd.new.rate(), rd.new.pct(.5), rd.new.pct(.99), rd.pool.shared())
				if sd != nil {
					rd.seed = sd.measure("seed: new", "the seed's bare handler, a new key per request: INSERT … ON CONFLICT DO NOTHING, instant charge, UPDATE", sd.newPayment("sim_success"), o.duration)
					fmt.Fprintf(os.Stderr, "bench: round %d: seed new %8.0f req/s\n", i+1, rd.seed.rate())
				}
				if pgb != "" {
					// The gateway sits idle meanwhile: its sweeper's one
					// query per interval is all it adds.
					if rd.ceiling, err = ceilings(ctx, pgb, o, filepath.Join(dir, strconv.Itoa(i))); err != nil {
						return err
					}
				}
				rounds = append(rounds, rd)
			}
			r = medianRound(rounds).new
			if sd != nil {
				results = append(results, r)
				r = medianOf(rounds, func(rd round) result { return rd.seed })
			}
		case "replay":
			for i := range max(1, o.rounds) {
				var rp replayRound
				if rp.gateway, err = d.replay(); err != nil {
					return err
				}
				if sd != nil {
					if rp.seed, err = sd.replay(); err != nil {
						return err
					}
					rp.seed.name, rp.seed.what = "seed: replay", "the seed's bare handler, every client replays one key: the INSERT (nothing inserted) and one SELECT"
				}
				fmt.Fprintf(os.Stderr, "bench: round %d: replay %8.0f req/s  seed %8.0f req/s\n", i+1, rp.gateway.rate(), rp.seed.rate())
				replays = append(replays, rp)
			}
			r = medianReplay(replays, func(rp replayRound) result { return rp.gateway })
			if sd != nil {
				results = append(results, r)
				r = medianReplay(replays, func(rp replayRound) result { return rp.seed })
			}
		case "storm":
			r = d.storm()
		case "mix":
			r = d.measure("mix", "60% new, 10% declined (402), 20% replays of the client's earlier keys, 10% GET by id", d.mix(), o.duration)
		default:
			return fmt.Errorf("unknown scenario %q", name)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "bench: %-7s %8.0f req/s  p50 %v  p99 %v\n", r.name, r.rate(), r.pct(.5), r.pct(.99))
		results = append(results, r)
	}
	gw.Stop()

	var slow slowReport
	if o.slow {
		if slow, err = measureSlow(ctx, o); err != nil {
			return err
		}
	}

	var recs []recovery
	for _, f := range strings.Split(o.recovery, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return fmt.Errorf("-recovery: %q", f)
		}
		rec, err := measureRecovery(ctx, o, n)
		if err != nil {
			return err
		}
		recs = append(recs, rec)
	}

	report := render(o, results, rounds, replays, recs, slow)
	fmt.Print(report)
	if o.out != "" {
		if err := os.MkdirAll(o.out, 0o755); err != nil {
			return err
		}
		path := filepath.Join(o.out, time.Now().Format("2006-01-02")+".md")
		if err := os.WriteFile(path, []byte(report), 0o644); err != nil {
			return err
		}
		fmt.Fprintln(os.Stderr, "bench: report written to", path)
	}
	return nil
}

// driver sends requests for one merchant.
type driver struct {
	hc   *fasthttp.HostClient
	base string
	m    rig.Merchant
	// seed: the seed peer, which takes the merchant from a header and
	// has no auth.
	seed       bool
	clients    int
	duration   time.Duration
	gatewayPid int
	seq        atomic.Int64
}

// call is one request made by worker w; it returns the HTTP status (0 for
// a transport error), whether it was a replay, and the payment's Location.
type call func(w int, rng *rand.Rand) (status int, replayed bool)

func (d *driver) body(method string) []byte {
	return []byte(`{"amount":5000,"currency":"NGN","email":"ada@example.com","payment_method":"` + method + `","description":"bench"}`)
}

// pay posts a payment and reports its status, replay flag and Location.
func (d *driver) pay(key string, body []byte) (int, bool, string) {
	return d.send(fasthttp.MethodPost, "/v1/payments", key, body)
}

// send makes one request on the driver's keep-alive connections. The
// client is fasthttp's, not net/http's: the clients share the two cores
// with the gateway and PostgreSQL, and net/http's two goroutines and
// channel hand-offs per request cost as much CPU as a fifth of what the
// gateway itself spends on a payment (pgbench, on the other side of the
// ratio, is a lean C client). A POST is never resent on a broken
// connection (fasthttp retries only idempotent methods), so a storm is
// what it says.
func (d *driver) send(method, path, key string, body []byte) (int, bool, string) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(method)
	req.SetRequestURI(d.base + path)
	if d.seed {
		req.Header.Set("X-Merchant-Id", d.m.ID)
	} else {
		req.Header.Set(fasthttp.HeaderAuthorization, "Bearer "+d.m.Token)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if body != nil {
		req.Header.SetContentType("application/json")
		req.SetBodyRaw(body)
	}
	if err := d.hc.Do(req, resp); err != nil {
		return 0, false, ""
	}
	return resp.StatusCode(), string(resp.Header.Peek("Idempotent-Replayed")) == "true", string(resp.Header.Peek(fasthttp.HeaderLocation))
}

func (d *driver) newPayment(method string) call {
	body := d.body(method)
	return func(int, *rand.Rand) (int, bool) {
		s, r, _ := d.pay(fmt.Sprintf("bench-new-%d", d.seq.Add(1)), body)
		return s, r
	}
}

// measure runs fn in d.clients goroutines for dur and collects every
// latency and status.
func (d *driver) measure(name, what string, fn call, dur time.Duration) result {
	return d.measureWith(name, what, nil, fn, dur)
}

// measureWith is measure with a step run before each timed request (the
// storm's barrier), whose wait is not the gateway's latency; before
// returning false ends the worker.
func (d *driver) measureWith(name, what string, before func(stop time.Time) bool, fn call, dur time.Duration) result {
	type part struct {
		lat      []time.Duration
		statuses map[int]int
		replayed int
	}
	parts := make([]part, d.clients)
	cpu := startCPU(d.gatewayPid)
	stop := time.Now().Add(dur)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range d.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := part{statuses: map[int]int{}}
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			for {
				if before != nil {
					if !before(stop) {
						break
					}
				} else if !time.Now().Before(stop) {
					break
				}
				t0 := time.Now()
				s, rep := fn(w, rng)
				p.lat = append(p.lat, time.Since(t0))
				p.statuses[s]++
				if rep {
					p.replayed++
				}
			}
			parts[w] = p
		}()
	}
	wg.Wait()
	r := result{name: name, what: what, elapsed: time.Since(start), statuses: map[int]int{}, cpu: cpu.stop()}
	for _, p := range parts {
		r.latencies = append(r.latencies, p.lat...)
		for k, v := range p.statuses {
			r.statuses[k] += v
		}
		r.replayed += p.replayed
	}
	slices.Sort(r.latencies)
	return r
}

// replay seeds one key and has every client replay it: one SELECT per
// request, the cheapest answer the API gives.
func (d *driver) replay() (result, error) {
	body := d.body("sim_success")
	if s, _, _ := d.pay("bench-replay", body); s != http.StatusCreated {
		return result{}, fmt.Errorf("replay seed: status %d", s)
	}
	return d.measure("replay", "every client replays one finished key (stored answer, Idempotent-Replayed)",
		func(int, *rand.Rand) (int, bool) {
			s, r, _ := d.pay("bench-replay", body)
			return s, r
		}, d.duration), nil
}

// storm sends rounds in which every client posts the same new key at the
// same moment: one claims it, the others are answered 409 in use (or the
// replay, if the owner finished first). Rounds repeat for the duration.
func (d *driver) storm() result {
	body := d.body("sim_success")
	var round atomic.Int64
	var mu sync.Mutex
	var gate chan struct{}
	var left int
	next := func() string { return fmt.Sprintf("bench-storm-%d", round.Load()) }
	// A barrier per round: the last client to arrive opens the next round.
	// The last client to arrive decides, for everyone, whether there is
	// another round: a worker deciding alone would leave the others waiting
	// at the barrier for ever.
	var over bool
	arrive := func(stop time.Time) bool {
		mu.Lock()
		g := gate
		left--
		if left == 0 {
			over = !time.Now().Before(stop)
			if !over {
				round.Add(1)
			}
			left = d.clients
			gate = make(chan struct{})
			close(g)
			mu.Unlock()
			return !over
		}
		mu.Unlock()
		<-g
		mu.Lock()
		defer mu.Unlock()
		return !over
	}
	gate, left = make(chan struct{}), d.clients
	// The barrier wait is not the gateway's latency: measure only the
	// request itself.
	r := d.measureWith("storm", fmt.Sprintf("rounds of %d clients posting the same new key at once", d.clients), arrive,
		func(int, *rand.Rand) (int, bool) {
			s, rep, _ := d.pay(next(), body)
			return s, rep
		}, d.duration)
	r.what += fmt.Sprintf(" (%d rounds)", round.Load())
	return r
}

// mix is a merchant fleet's day: mostly new payments, some declines,
// retries of keys the client already used, and reads.
func (d *driver) mix() call {
	ok, declined := d.body("sim_success"), d.body("sim_decline")
	var mu sync.Mutex
	keys := map[int][]string{}
	ids := map[int][]string{}
	remember := func(w int, key, loc string) {
		mu.Lock()
		defer mu.Unlock()
		if len(keys[w]) < 1000 {
			keys[w] = append(keys[w], key)
			if loc != "" {
				ids[w] = append(ids[w], loc)
			}
		}
	}
	pick := func(w int, rng *rand.Rand, m map[int][]string) string {
		mu.Lock()
		defer mu.Unlock()
		if len(m[w]) == 0 {
			return ""
		}
		return m[w][rng.IntN(len(m[w]))]
	}
	return func(w int, rng *rand.Rand) (int, bool) {
		n := rng.IntN(100)
		switch {
		case n < 20:
			if key := pick(w, rng, keys); key != "" {
				s, rep, _ := d.pay(key, ok)
				return s, rep
			}
		case n < 30:
			if loc := pick(w, rng, ids); loc != "" {
				s, rep, _ := d.send(fasthttp.MethodGet, loc, "", nil)
				return s, rep
			}
		case n < 40:
			s, rep, _ := d.pay(fmt.Sprintf("bench-mix-%d", d.seq.Add(1)), declined)
			return s, rep
		}
		key := fmt.Sprintf("bench-mix-%d", d.seq.Add(1))
		s, rep, loc := d.pay(key, ok)
		if s == http.StatusCreated {
			remember(w, key, loc)
		}
		return s, rep
	}
}

func render(o options, results []result, rounds []round, replays []replayRound, recs []recovery, slow slowReport) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Gateway benchmark, %s\n\n", time.Now().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "Machine: %d CPUs (%s/%s), %s, %s. Gateway and clients share the machine with PostgreSQL.\n\n",
		runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), pgVersion(o.db))
	fmt.Fprintf(&b, "Settings: %d concurrent HTTP clients over loopback, %s per scenario, %d rounds of new payments alternating with pgbench, DATABASE_MAX_CONNS=%d, simulator provider at SIMULATOR_LATENCY=0, RATE_LIMIT_PER_SECOND=0, LOG_LEVEL=error. Reproduce with `make bench BENCH_DURATION=%s BENCH_CLIENTS=%d%s`.\n\n",
		o.clients, o.duration, len(rounds), o.conns, o.duration, o.clients, roundsFlag(o.rounds))
	if len(rounds) > 0 && rounds[0].pool.gc() != "" {
		fmt.Fprintf(&b, "The gateway's garbage collector (its /metrics): %s.\n\n", rounds[0].pool.gc())
	}
	b.WriteString("| scenario | req/s | p50 | p95 | p99 | answers | what |\n|---|---:|---:|---:|---:|---|---|\n")
	row := func(r result) {
		fmt.Fprintf(&b, "| %s | %.0f | %s | %s | %s | %s | %s |\n", r.name, r.rate(),
			ms(r.pct(.5)), ms(r.pct(.95)), ms(r.pct(.99)), answers(r), r.what)
	}
	for _, r := range results {
		row(r)
	}
	withCeiling := len(rounds) > 0 && len(rounds[0].ceiling) > 0
	if withCeiling {
		for i := range scripts {
			row(medianCeiling(rounds, i))
		}
	}
	if len(rounds) > 0 {
		rows, order := "The `new` row is", ""
		if withCeiling {
			rows = "The `new` row and each pgbench row are"
			order = "; in each round new payments ran first and pgbench right after, on the same PostgreSQL (pgbench on a fresh database of the same schema each round, so its rows never grow the gateway's tables)"
		}
		fmt.Fprintf(&b, "\n%s the median of %d rounds%s. Statements per round trip are the gateway's database pipeline's (its /metrics): concurrent requests' claims and completions share round trips and commits there, which pgbench's one payment per transaction does not, so the gateway can pass this ceiling.\n\n", rows, len(rounds), order)
		b.WriteString("| round | new req/s | statements per round trip |")
		for _, s := range scripts {
			if withCeiling {
				fmt.Fprintf(&b, " %s tx/s | ratio |", s.short)
			}
		}
		b.WriteString("\n|---:|---:|---:|")
		if withCeiling {
			b.WriteString(strings.Repeat("---:|---:|", len(scripts)))
		}
		b.WriteString("\n")
		for n, r := range rounds {
			fmt.Fprintf(&b, "| %d | %.0f | %s |", n+1, r.new.rate(), r.pool.shared())
			for i := range r.ceiling {
				fmt.Fprintf(&b, " %.0f | %.0f%% |", r.ceiling[i].rate(), 100*r.ratio(i))
			}
			b.WriteString("\n")
		}
	}
	if withCeiling {
		b.WriteString("\n")
		median := func(i int) float64 {
			ratios := make([]float64, len(rounds))
			for n, r := range rounds {
				ratios[n] = r.ratio(i)
			}
			slices.Sort(ratios)
			return 100 * ratios[len(ratios)/2]
		}
		fmt.Fprintf(&b, "New payments through the gateway reach **%.0f%% of the ceiling**, pgbench running the same SQL on PostgreSQL alone (median of the rounds' ratios; %d connections, prepared statements)", median(0), o.conns)
		for i := 1; i < len(scripts); i++ {
			fmt.Fprintf(&b, ", and %.0f%% of %s", median(i), scripts[i].short)
		}
		b.WriteString(".\n")
	}
	peerTable(&b, rounds, replays)
	cpuTable(&b, results, rounds, withCeiling)
	renderSlow(&b, o, slow)
	renderRecovery(&b, o, recs)
	b.WriteString("\nLatencies are client-side, per request, including loopback HTTP; pgbench latencies are per script run (one payment's transactions). A storm answers most requests with 409 `idempotency_key_in_use`, by design.\n")
	return b.String()
}

// cpuTable says where each measurement's CPU went, per request (per script
// run for pgbench), from /proc: the ratio of two rates is only as good as
// the machine's steadiness, the CPU per request explains it.
func cpuTable(b *strings.Builder, results []result, rounds []round, withCeiling bool) {
	rows := slices.Clone(results)
	if withCeiling {
		for i := range scripts {
			rows = append(rows, medianCeiling(rounds, i))
		}
	}
	head := false
	for _, r := range rows {
		if !r.cpu.ok {
			continue
		}
		if !head {
			b.WriteString("\nCPU time per request (user + system, from /proc), and how many of the machine's CPUs the run kept busy:\n\n")
			b.WriteString("| scenario | server (gateway or seed) | PostgreSQL | client | total | CPUs busy |\n|---|---:|---:|---:|---:|---:|\n")
			head = true
		}
		server, pg, client := r.cpu.perRequest(len(r.latencies))
		gw := "—"
		if server > 0 {
			gw = us(server)
		}
		busy := float64(r.cpu.server+r.cpu.postgres+r.cpu.client) / float64(r.elapsed)
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %.2f of %d |\n", r.name, gw, us(pg), us(client), us(server+pg+client), busy, runtime.NumCPU())
	}
	if head {
		b.WriteString("\nThe client is this program's HTTP clients for the gateway's scenarios and pgbench itself for its rows.\n")
	}
}

// roundsFlag is the BENCH_FLAGS that reproduce a run of n rounds.
func roundsFlag(n int) string {
	if n == 3 {
		return ""
	}
	return fmt.Sprintf(" BENCH_FLAGS=-rounds=%d", n)
}

func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond)) }

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

func answers(r result) string {
	if r.statuses == nil {
		return ""
	}
	codes := make([]int, 0, len(r.statuses))
	for k := range r.statuses {
		codes = append(codes, k)
	}
	slices.Sort(codes)
	var parts []string
	for _, c := range codes {
		label := strconv.Itoa(c)
		switch c {
		case 0:
			if strings.HasPrefix(r.name, "pgbench") {
				label = "tx"
			} else {
				label = "transport error"
			}
		}
		parts = append(parts, fmt.Sprintf("%s×%d", label, r.statuses[c]))
	}
	if r.replayed > 0 {
		parts = append(parts, fmt.Sprintf("(replayed %d)", r.replayed))
	}
	return strings.Join(parts, " ")
}

// pgVersion asks psql for the server version; the report is still useful
// without it.
func pgVersion(dbURL string) string {
	out, err := exec.Command("psql", dbURL, "-tAc", "SHOW server_version").Output()
	if err != nil {
		return "PostgreSQL (version unknown)"
	}
	v := strings.TrimSpace(string(out))
	if i := strings.IndexByte(v, ' '); i > 0 {
		v = v[:i]
	}
	return "PostgreSQL " + v
}
