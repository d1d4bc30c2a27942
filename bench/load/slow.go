package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/oncepay/gateway/bench/internal/rig"
)

// The slow-provider scenario (issue 17): the simulator answers every charge
// after -slow-latency (1 s), so with C clients in a closed loop the bound
// is C / latency payments a second at the latency itself; whatever the
// gateway adds shows as the distance from both. It runs the gateway with
// its own pool default (DATABASE_MAX_CONNS unset: the default is part of
// what is measured) and, with -slow-baseline, another gateway binary (the
// one before a change) beside it on the same database, each with its own
// merchant, alternating round by round so both see the same machine.

// slowGateway is one gateway binary under the slow provider.
type slowGateway struct {
	label string
	proc  *rig.Process
	d     *driver
	base  string
	rss   *rssSampler
	// latency is the provider's: the steady state starts three of them in.
	latency time.Duration
}

// slowRun is one measurement: a round of -slow-clients, or the wide one.
type slowRun struct {
	label   string
	clients int
	r       result
	pool    poolDelta
	rssPeak int64 // kB, the highest VmRSS sampled during the run
	hwm     int64 // kB, VmHWM at the end of the run (the process's peak so far)
	// The run split in time: the first wave (requests sent in its first
	// 100 ms: every client at once, as when a fleet of apps starts or
	// a load balancer sends an instance its share all together) and the
	// steady state (requests sent after three provider latencies, when
	// the waves have spread out).
	first, steady []time.Duration
}

func pctOf(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(float64(len(sorted)-1)*p)]
}

// slowReport is what the scenario measured for every gateway.
type slowReport struct {
	latency time.Duration
	clients int
	wide    int
	dur     time.Duration
	rounds  []map[string]slowRun // per round, by label
	wides   map[string]slowRun
	labels  []string
}

func measureSlow(ctx context.Context, o options) (rep slowReport, err error) {
	rep = slowReport{latency: o.slowLatency, clients: o.slowClients, wide: o.slowWide, dur: o.slowDuration, wides: map[string]slowRun{}}
	raiseNoFile(2*max(o.slowClients, o.slowWide) + 256)
	db, err := rig.CreateDatabase(ctx, o.db, "oncepay_bench_slow")
	if err != nil {
		return rep, err
	}
	defer func() { _ = db.Drop(context.Background()) }()
	dir, err := os.MkdirTemp("", "oncepay-bench-slow-")
	if err != nil {
		return rep, err
	}
	defer os.RemoveAll(dir)
	logf, err := os.Create(filepath.Join(dir, "gateway.log"))
	if err != nil {
		return rep, err
	}
	defer logf.Close()
	if keep := os.Getenv("BENCH_SLOW_LOG"); keep != "" {
		// The gateways' log (LOG_LEVEL=error: what went wrong), kept for a
		// look after the run.
		defer func() {
			if b, err := os.ReadFile(logf.Name()); err == nil {
				_ = os.WriteFile(keep, b, 0o644)
			}
		}()
	}

	bins := [][3]string{{"gateway", o.gateway, o.slowEnv}}
	if o.slowBaseline != "" {
		bins = append([][3]string{{"baseline", o.slowBaseline, o.slowBaselineEnv}}, bins...)
	}
	var gws []*slowGateway
	defer func() {
		for _, g := range gws {
			g.rss.stop()
			g.proc.Stop()
		}
	}()
	for i, b := range bins {
		addr, err := rig.FreeAddr()
		if err != nil {
			return rep, err
		}
		env := rig.GatewayEnv(db.URL, filepath.Join(dir, strconv.Itoa(i)))
		env["GATEWAY_ADDR"] = addr
		env["LOG_LEVEL"] = "error"
		env["SIMULATOR_LATENCY"] = o.slowLatency.String()
		for _, kv := range strings.Split(b[2], ",") {
			if k, v, ok := strings.Cut(strings.TrimSpace(kv), "="); ok {
				env[k] = v
			}
		}
		base := "http://" + addr
		p := &rig.Process{Bin: b[1], Args: []string{"serve"}, Env: env, Health: base + "/healthz", Log: logf}
		if err := p.Start(); err != nil {
			return rep, err
		}
		g := &slowGateway{label: b[0], proc: p, base: base, rss: startRSS(p.Pid()), latency: o.slowLatency}
		gws = append(gws, g)
		m, err := rig.Onboard(ctx, rig.Client(30*time.Second), base, map[string]any{"name": "Slow " + b[0], "default_provider": "simulator"})
		if err != nil {
			return rep, err
		}
		// Connections enough for the widest run, a generous timeout (an
		// answer that comes late is still an answer, and counted as late),
		// and no wait for a free connection.
		hc := &fasthttp.HostClient{
			Addr: addr, MaxConns: 2 * max(o.slowClients, o.slowWide), MaxIdleConnDuration: time.Minute,
			ReadTimeout: o.slowTimeout, WriteTimeout: o.slowTimeout,
		}
		g.d = &driver{hc: hc, base: base, m: m, gatewayPid: p.Pid()}
		rep.labels = append(rep.labels, b[0])
		// Warm up: connections, statement caches, the runtime's heap.
		g.run("warmup", 50, min(3*time.Second, o.slowDuration))
	}
	if err := db.Analyze(ctx); err != nil {
		return rep, err
	}

	for i := range max(1, o.rounds) {
		runs := map[string]slowRun{}
		// Every other round in the other order, each run once the machine
		// is quiet: the gateway that ran first is still busy for a while
		// (its simulator's charge rows, the events of its payments), and
		// the second run of a round paid for it — a binary measured second
		// in every round came out 5–20% slower whichever it was.
		order := slices.Clone(gws)
		if i%2 == 1 {
			slices.Reverse(order)
		}
		for _, g := range order {
			settle(gws)
			r := g.run(fmt.Sprintf("slow %d", i+1), o.slowClients, o.slowDuration)
			runs[g.label] = r
			gcpu, pcpu, ccpu := r.r.cpu.perRequest(len(r.r.latencies))
			fmt.Fprintf(os.Stderr, "bench: slow round %d: %-8s %d clients %6.1f req/s (%.0f%% of %.0f/s)  p50 %v  p99 %v  max %v  first wave p50 %v p99 %v, steady p99 %v  pool waits %d (%.0f ms per request)  statements per round trip %s  mean: client %.0f ms, handler %.0f ms, Charge %.0f ms  CPU per request: gateway %s, PostgreSQL %s, client %s\n",
				i+1, g.label, o.slowClients, r.r.rate(), 100*r.r.rate()/rep.bound(o.slowClients), rep.bound(o.slowClients),
				r.r.pct(.5).Round(time.Millisecond), r.r.pct(.99).Round(time.Millisecond), r.r.pct(1).Round(time.Millisecond),
				pctOf(r.first, .5).Round(time.Millisecond), pctOf(r.first, .99).Round(time.Millisecond), pctOf(r.steady, .99).Round(time.Millisecond),
				r.pool.count, r.pool.perRequest(len(r.r.latencies)), r.pool.shared(), meanLatency(r.r), mean(r.pool.server, r.pool.serverN), mean(r.pool.provider, r.pool.providerN), us(gcpu), us(pcpu), us(ccpu))
		}
		rep.rounds = append(rep.rounds, runs)
	}
	if o.slowWide > 0 {
		for _, g := range gws {
			r := g.run("slow wide", o.slowWide, o.slowDuration)
			rep.wides[g.label] = r
			fmt.Fprintf(os.Stderr, "bench: slow wide: %-8s %d clients %6.1f req/s  p50 %v  p99 %v  max %v  errors %d  peak RSS %d MiB (VmHWM %d MiB)\n",
				g.label, o.slowWide, r.r.rate(), r.r.pct(.5).Round(time.Millisecond), r.r.pct(.99).Round(time.Millisecond),
				r.r.pct(1).Round(time.Millisecond), failures(r.r), r.rssPeak/1024, r.hwm/1024)
		}
	}
	return rep, nil
}

// settle waits until the gateways and PostgreSQL are quiet — under a
// tenth of a CPU over a quarter of a second — or 15 s have passed.
func settle(gws []*slowGateway) {
	busy := func() time.Duration {
		t, _ := postgresCPU()
		for _, g := range gws {
			c, _ := procCPU(strconv.Itoa(g.proc.Pid()), false)
			t += c
		}
		return t
	}
	const window = 250 * time.Millisecond
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); {
		before := busy()
		time.Sleep(window)
		if busy()-before < window/10 {
			return
		}
	}
}

// bound is the closed loop's ceiling: every client waits the provider's
// latency per payment, and nothing else.
func (rep slowReport) bound(clients int) float64 { return float64(clients) / rep.latency.Seconds() }

// run drives g with clients closed-loop clients, a new key per request,
// for dur.
func (g *slowGateway) run(name string, clients int, dur time.Duration) slowRun {
	d := g.d
	d.clients, d.duration = clients, dur
	before, _ := scrapePool(d.hc, g.base)
	g.rss.reset()
	body := d.body("sim_success")
	prefix := fmt.Sprintf("bench-slow-%s-%d-", strings.ReplaceAll(name, " ", "-"), time.Now().UnixNano())
	r, trace := g.closedLoop(name, clients, dur, func() int {
		return d.payOrTimeout(prefix+strconv.FormatInt(d.seq.Add(1), 10), body)
	})
	if f := os.Getenv("BENCH_SLOW_TRACE"); f != "" {
		writeTrace(f+"-"+g.label+"-"+strings.ReplaceAll(name, " ", "-"), trace)
	}
	after, _ := scrapePool(d.hc, g.base)
	run := slowRun{label: g.label, clients: clients, r: r, pool: after.sub(before), rssPeak: g.rss.peak(), hwm: vmStatus(g.proc.Pid(), "VmHWM")}
	for _, s := range trace {
		switch {
		case s.at < 100*time.Millisecond:
			run.first = append(run.first, s.took)
		case s.at >= 3*g.latency:
			run.steady = append(run.steady, s.took)
		}
	}
	slices.Sort(run.first)
	slices.Sort(run.steady)
	return run
}

// sample is one request of a closed loop: when it was sent (from the
// run's start), how long it took, and its status.
type sample struct {
	at, took time.Duration
	status   int
}

// closedLoop runs fn in clients goroutines for dur, each sending its next
// request as soon as the last is answered, and keeps every sample.
func (g *slowGateway) closedLoop(name string, clients int, dur time.Duration, fn func() int) (result, []sample) {
	parts := make([][]sample, clients)
	cpu := startCPU(g.d.gatewayPid)
	start := time.Now()
	stop := start.Add(dur)
	var wg sync.WaitGroup
	for w := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				t0 := time.Now()
				if !t0.Before(stop) {
					return
				}
				s := fn()
				parts[w] = append(parts[w], sample{at: t0.Sub(start), took: time.Since(t0), status: s})
			}
		}()
	}
	wg.Wait()
	r := result{name: name, elapsed: time.Since(start), statuses: map[int]int{}, cpu: cpu.stop()}
	var all []sample
	for _, p := range parts {
		for _, s := range p {
			r.latencies = append(r.latencies, s.took)
			r.statuses[s.status]++
		}
		all = append(all, p...)
	}
	slices.Sort(r.latencies)
	slices.SortFunc(all, func(a, b sample) int { return int(a.at - b.at) })
	return r, all
}

// writeTrace writes one line per request (sent at, took, status; ms), for
// a look at how latency moves through a run.
func writeTrace(path string, trace []sample) {
	var b strings.Builder
	for _, s := range trace {
		fmt.Fprintf(&b, "%.1f %.1f %d\n", msf(s.at), msf(s.took), s.status)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "bench: trace:", err)
	}
}

// statusTimeout counts requests that got no answer within the client's
// timeout; 0 (statuses' transport error) any other failure.
const statusTimeout = -1

func (d *driver) payOrTimeout(key string, body []byte) int {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI(d.base + "/v1/payments")
	req.Header.Set(fasthttp.HeaderAuthorization, "Bearer "+d.m.Token)
	req.Header.Set("Idempotency-Key", key)
	req.Header.SetContentType("application/json")
	req.SetBodyRaw(body)
	if err := d.hc.Do(req, resp); err != nil {
		if errors.Is(err, fasthttp.ErrTimeout) {
			return statusTimeout
		}
		return 0
	}
	return resp.StatusCode()
}

// failures counts the requests not answered 201.
func failures(r result) int {
	n := 0
	for s, k := range r.statuses {
		if s != 201 {
			n += k
		}
	}
	return n
}

// raiseNoFile lifts this process's open-file limit to at least n (up to
// the hard limit): every client holds a connection, and the gateway, a
// child, inherits the limit.
func raiseNoFile(n int) {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) != nil {
		return
	}
	if l.Cur >= uint64(n) {
		return
	}
	l.Cur = min(max(uint64(n), l.Cur), l.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		fmt.Fprintln(os.Stderr, "bench: raise the open-file limit:", err)
	}
	if l.Cur < uint64(n) {
		fmt.Fprintf(os.Stderr, "bench: open-file limit %d is below the %d connections asked for\n", l.Cur, n)
	}
}

// poolStats are the gateway pool's database/sql counters, from its
// /metrics (collectors.NewDBStatsCollector).
type poolStats struct {
	count int64
	wait  time.Duration
	open  int64
	// The gateway's own clocks: time inside POST /v1/payments (the HTTP
	// middleware's histogram) and inside the provider's Charge (the
	// simulator's sleep and its charge row), sums and counts.
	server, provider   time.Duration
	serverN, providerN int64
	// The database pipeline's statements and the round trips they took
	// (oncepay_db_pipeline_*): their ratio is how many requests shared one.
	pipeStatements, pipeTrips int64
	// The gateway's garbage collector as it runs (go_gc_gogc_percent,
	// go_gc_gomemlimit_bytes): settings, not counters, so a delta keeps
	// the later scrape's.
	gcPercent, memLimit float64
	gcSeen              bool
}

type poolDelta = poolStats

func (a poolStats) sub(b poolStats) poolStats {
	return poolStats{count: a.count - b.count, wait: a.wait - b.wait, open: a.open,
		server: a.server - b.server, serverN: a.serverN - b.serverN, provider: a.provider - b.provider, providerN: a.providerN - b.providerN,
		pipeStatements: a.pipeStatements - b.pipeStatements, pipeTrips: a.pipeTrips - b.pipeTrips,
		gcPercent: a.gcPercent, memLimit: a.memLimit, gcSeen: a.gcSeen}
}

// gc says what the gateway's collector ran with, for the report's
// settings ("" when its /metrics did not say).
func (a poolStats) gc() string {
	if !a.gcSeen {
		return ""
	}
	gogc := fmt.Sprintf("GOGC=%.0f", a.gcPercent)
	if a.gcPercent < 0 {
		gogc = "GOGC=off"
	}
	limit := "no memory limit"
	if a.memLimit > 0 && a.memLimit < math.MaxInt64 {
		limit = fmt.Sprintf("GOMEMLIMIT=%.0f MiB", a.memLimit/(1<<20))
	}
	return gogc + ", " + limit
}

// shared is the pipeline's statements per round trip ("–" without one).
func (a poolStats) shared() string {
	if a.pipeTrips == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", float64(a.pipeStatements)/float64(a.pipeTrips))
}

// mean is sum / n in ms.
func mean(sum time.Duration, n int64) float64 {
	if n == 0 {
		return 0
	}
	return float64(sum) / float64(time.Millisecond) / float64(n)
}

// perRequest is the pool wait per request, in ms.
func (a poolStats) perRequest(n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(a.wait) / float64(time.Millisecond) / float64(n)
}

func scrapePool(hc *fasthttp.HostClient, base string) (poolStats, error) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(base + "/metrics")
	if err := hc.DoTimeout(req, resp, 10*time.Second); err != nil {
		return poolStats{}, err
	}
	var s poolStats
	sc := bufio.NewScanner(strings.NewReader(string(resp.Body())))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, val, ok := metricLine(line)
		if !ok {
			continue
		}
		payments := strings.Contains(line, `route="/v1/payments"`) && strings.Contains(line, `method="POST"`)
		charge := strings.Contains(line, `op="charge"`)
		switch name = strings.TrimPrefix(name, "oncepay_"); {
		case name == "http_request_duration_seconds_sum" && payments:
			s.server += time.Duration(val * float64(time.Second))
		case name == "http_request_duration_seconds_count" && payments:
			s.serverN += int64(val)
		case name == "provider_request_duration_seconds_sum" && charge:
			s.provider += time.Duration(val * float64(time.Second))
		case name == "provider_request_duration_seconds_count" && charge:
			s.providerN += int64(val)
		}
		switch name {
		case "go_sql_wait_count_total":
			s.count = int64(val)
		case "go_sql_wait_duration_seconds_total":
			s.wait = time.Duration(val * float64(time.Second))
		case "go_sql_max_open_connections":
			s.open = int64(val)
		case "db_pipeline_statements_total":
			s.pipeStatements = int64(val)
		case "db_pipeline_round_trips_total":
			s.pipeTrips = int64(val)
		case "go_gc_gogc_percent":
			s.gcPercent, s.gcSeen = val, true
		case "go_gc_gomemlimit_bytes":
			s.memLimit = val
		}
	}
	return s, sc.Err()
}

// metricLine splits `name{labels} value` (or `name value`).
func metricLine(line string) (string, float64, bool) {
	i := strings.LastIndexByte(line, ' ')
	if i < 0 {
		return "", 0, false
	}
	v, err := strconv.ParseFloat(line[i+1:], 64)
	if err != nil {
		return "", 0, false
	}
	name := line[:i]
	if j := strings.IndexByte(name, '{'); j >= 0 {
		name = name[:j]
	}
	return name, v, true
}

// vmStatus reads a kB field (VmRSS, VmHWM) of /proc/<pid>/status; 0 when
// it cannot.
func vmStatus(pid int, field string) int64 {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// rssSampler samples a process's VmRSS every 100 ms and keeps the highest
// since the last reset.
type rssSampler struct {
	max  atomic.Int64
	done chan struct{}
	once sync.Once
}

func startRSS(pid int) *rssSampler {
	s := &rssSampler{done: make(chan struct{})}
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-s.done:
				return
			case <-t.C:
				if v := vmStatus(pid, "VmRSS"); v > s.max.Load() {
					s.max.Store(v)
				}
			}
		}
	}()
	return s
}

func (s *rssSampler) reset()      { s.max.Store(0) }
func (s *rssSampler) peak() int64 { return s.max.Load() }
func (s *rssSampler) stop()       { s.once.Do(func() { close(s.done) }) }

// renderSlow writes the scenario's section of the report.
func renderSlow(b *strings.Builder, o options, rep slowReport) {
	if len(rep.rounds) == 0 {
		return
	}
	bound := rep.bound(rep.clients)
	fmt.Fprintf(b, "\nSlow provider (issue 17): SIMULATOR_LATENCY=%s on every charge, the gateway's own pool default (DATABASE_MAX_CONNS unset), RATE_LIMIT_PER_SECOND=0; %d closed-loop clients, a new key per request, %s per round, client timeout %s. The bound is %d clients ÷ %s = **%.0f payments/s at %s**; what the gateway adds is the distance from it. Pool waits are database/sql's WaitCount and WaitDuration over the run (the gateway's /metrics).\n\n",
		rep.latency, rep.clients, rep.dur, o.slowTimeout, rep.clients, rep.latency, bound, rep.latency)
	b.WriteString("| gateway | round | req/s | of the bound | p50 | p99 | max | first wave p50 / p99 | steady p99 | not 201 | pool waits | pool wait per request | statements per round trip | mean: client / handler / Charge | CPU per request: gateway / PostgreSQL / client | CPUs busy |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|\n")
	for _, label := range rep.labels {
		for i, runs := range rep.rounds {
			r := runs[label]
			gcpu, pcpu, ccpu := r.r.cpu.perRequest(len(r.r.latencies))
			fmt.Fprintf(b, "| %s | %d | %.0f | %.1f%% | %s | %s | %s | %s / %s | %s | %s | %d | %.1f ms | %s | %s | %s / %s / %s | %s |\n", label, i+1, r.r.rate(), 100*r.r.rate()/bound,
				ms(r.r.pct(.5)), ms(r.r.pct(.99)), ms(r.r.pct(1)), ms(pctOf(r.first, .5)), ms(pctOf(r.first, .99)), ms(pctOf(r.steady, .99)),
				notOK(r.r), r.pool.count, r.pool.perRequest(len(r.r.latencies)), r.pool.shared(), means(r), us(gcpu), us(pcpu), us(ccpu), busy(r.r))
		}
	}
	b.WriteString("\nMedians over the rounds (the first wave is the requests sent in a round's first 100 ms, all clients at once; the steady state those sent after three provider latencies):\n\n| gateway | req/s | of the bound | p50 | p99 | max | first wave p99 | steady p99 | pool wait per request |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, label := range rep.labels {
		med := func(f func(slowRun) float64) float64 {
			var xs []float64
			for _, runs := range rep.rounds {
				xs = append(xs, f(runs[label]))
			}
			return medianFloat(xs)
		}
		rate := med(func(r slowRun) float64 { return r.r.rate() })
		fmt.Fprintf(b, "| %s | %.0f | **%.1f%%** | %.2f ms | **%.2f ms** | %.2f ms | %.2f ms | %.2f ms | %.1f ms |\n", label, rate, 100*rate/bound,
			med(func(r slowRun) float64 { return msf(r.r.pct(.5)) }), med(func(r slowRun) float64 { return msf(r.r.pct(.99)) }),
			med(func(r slowRun) float64 { return msf(r.r.pct(1)) }), med(func(r slowRun) float64 { return msf(pctOf(r.first, .99)) }),
			med(func(r slowRun) float64 { return msf(pctOf(r.steady, .99)) }), med(func(r slowRun) float64 { return r.pool.perRequest(len(r.r.latencies)) }))
	}
	if len(rep.wides) == 0 {
		return
	}
	fmt.Fprintf(b, "\n%d closed-loop clients (the bound %.0f/s is past what 2 cores serve: this is whether the gateway stays up, answers every request and keeps its memory bounded), %s, client timeout %s; peak RSS is the highest VmRSS sampled every 100 ms during the run, VmHWM the process's peak since its start:\n\n",
		rep.wide, rep.bound(rep.wide), rep.dur, o.slowTimeout)
	b.WriteString("| gateway | req/s | p50 | p99 | max | answers | not 201 | pool wait per request | mean: client / handler / Charge | peak RSS | VmHWM | CPUs busy |\n|---|---:|---:|---:|---:|---|---:|---:|---|---:|---:|---:|\n")
	for _, label := range rep.labels {
		r, ok := rep.wides[label]
		if !ok {
			continue
		}
		fmt.Fprintf(b, "| %s | %.0f | %s | %s | %s | %s | %s | %.1f ms | %s | %.0f MiB | %.0f MiB | %s |\n", label, r.r.rate(), ms(r.r.pct(.5)), ms(r.r.pct(.99)), ms(r.r.pct(1)),
			slowAnswers(r.r), notOK(r.r), r.pool.perRequest(len(r.r.latencies)), means(r), float64(r.rssPeak)/1024, float64(r.hwm)/1024, busy(r.r))
	}
}

// means is the mean latency at the client, inside the gateway's handler
// and inside the provider's Charge.
func means(r slowRun) string {
	return fmt.Sprintf("%.0f / %.0f / %.0f ms", meanLatency(r.r), mean(r.pool.server, r.pool.serverN), mean(r.pool.provider, r.pool.providerN))
}

// meanLatency is the clients' mean latency in ms.
func meanLatency(r result) float64 {
	if len(r.latencies) == 0 {
		return 0
	}
	var sum time.Duration
	for _, l := range r.latencies {
		sum += l
	}
	return msf(sum) / float64(len(r.latencies))
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func notOK(r result) string { return strconv.Itoa(failures(r)) }

func busy(r result) string {
	if !r.cpu.ok || r.elapsed == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", float64(r.cpu.server+r.cpu.postgres+r.cpu.client)/float64(r.elapsed))
}

// slowAnswers is answers with the client's timeouts named.
func slowAnswers(r result) string {
	codes := make([]int, 0, len(r.statuses))
	for k := range r.statuses {
		codes = append(codes, k)
	}
	slices.Sort(codes)
	var parts []string
	for _, c := range codes {
		label := strconv.Itoa(c)
		switch c {
		case statusTimeout:
			label = "timeout"
		case 0:
			label = "transport error"
		}
		parts = append(parts, fmt.Sprintf("%s×%d", label, r.statuses[c]))
	}
	return strings.Join(parts, " ")
}
