// Command chaos is the gateway's fault-injection run (`make chaos`).
//
// Several merchants make thousands of payments through three instances of
// the real gateway binary behind a real load balancer (HAProxy, started
// here with a generated configuration: round-robin, health checks on
// /readyz), all on one database and sharing their rate limits in Redis,
// one of them with its clock 90 s ahead (CLOCK_SKEW), while everything
// that can fail does:
//
//   - a proxy between the clients and the load balancer cuts a share of
//     the connections after the gateway has answered (the answer is lost);
//   - the provider (bench/fakeprovider, a separate Paystack-compatible
//     process) adds latency, answers some requests 5xx, cuts some
//     connections after storing the charge, and lets some charges land
//     late: charged, the answer cut, and "not found" on lookups for a few
//     seconds — long enough for the sweeper to release the key as
//     not_processed, so only the gateway's recheck (RECHECK_AFTER) or a
//     retry can find the charge;
//   - the instances are SIGKILLed and restarted, one at a time while the
//     others serve, on the same database, with a short lease, stale age
//     and sweep interval;
//   - PostgreSQL itself is restarted once, under the running gateway.
//
// A share of the succeeded payments (-refund-share) is refunded under the
// same faults, beside the other payments: every second one raced by
// -refund-racers keys at once, each for 40% of it (so one of three is
// refused 400 refund_exceeds_remaining); the fake refunds like Paystack
// (no dedupe, queued then processed or failed; cut or 500 after storing).
// Each refund client retries its key with the byte-identical body until
// 201 (succeeded or failed) or that 400, and replays a 201. The audit adds
// refunded ≤ charged (ledger and provider), amount_refunded = pending +
// succeeded refunds, exactly one processed provider refund per succeeded
// refund and none the ledger did not make, none pending after the settle
// wait, stored = client answers, and agreement across instances.
//
// Each client retries one payment with the same key and the byte-identical
// body until it gets a final answer (201 or 402). Some apps are slower: a
// patient one, after a 202, comes back only once the gateway's recheck is
// due (and must then get the re-opened payment's replay); an abandoned one
// never comes back after a 202, so only the sweeper and the recheck can
// settle its payment. When every client is done, the run waits (bounded)
// for the sweeper and the pending rechecks and audits the ledger, the
// stored answers, the clients' answers and the provider's charges against
// each other. After its final answer each client asks again a few times
// (-replays), so a key's answers come from several instances: any two
// final answers for one key that differ are a violation too. Any
// violation exits 1.
//
//	chaos -gateway bin/gateway -provider bin/fakeprovider [-long] [-payments N] ...
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/gateway/bench/internal/rig"
)

// providerSecret is the Paystack secret key the fake accepts and every
// chaos merchant is onboarded with.
const providerSecret = "sk_test_oncepay_chaos_000000000000000000"

type options struct {
	gateway, provider, db         string
	long                          bool
	merchants, payments           int
	clients, kills                int
	declineEvery                  int
	dropRate                      float64
	provLatency                   time.Duration
	provFail, provCut             float64
	provLate                      float64
	landAfter                     time.Duration
	recheckAfter                  time.Duration
	patientEvery                  int
	abandonEvery                  int
	patience                      time.Duration
	pgRestart                     bool
	instances                     int
	skew                          time.Duration
	haproxy                       string
	redis                         string
	replays                       int
	tamperEvery                   int
	settleWait                    time.Duration
	hookFail, hookDrop, hookDelay float64
	hookWait                      time.Duration
	keepLogs                      bool
	providerFlags                 string
	refundShare                   float64
	refundRacers                  int
	provRefundFail                float64
}

func main() {
	var o options
	flag.StringVar(&o.gateway, "gateway", "bin/gateway", "gateway binary")
	flag.StringVar(&o.provider, "provider", "bin/fakeprovider", "fake provider binary (bench/fakeprovider)")
	flag.StringVar(&o.db, "db", envOr("TEST_DATABASE_URL", rig.DefaultDatabaseURL), "PostgreSQL to create the chaos database on")
	flag.BoolVar(&o.long, "long", false, "long form: more merchants, payments and kills (defaults below are the short, CI form)")
	flag.IntVar(&o.merchants, "merchants", 0, "merchants (default 4; long 8)")
	flag.IntVar(&o.payments, "payments", 0, "logical payments (default 1000; long 5000)")
	flag.IntVar(&o.clients, "clients", 0, "concurrent clients (default 16; long 32)")
	flag.IntVar(&o.kills, "kills", 0, "gateway SIGKILL+restarts (default 5; long 10)")
	flag.IntVar(&o.declineEvery, "decline-every", 5, "every n-th payment uses a card the provider declines")
	flag.Float64Var(&o.dropRate, "drop-rate", 0.1, "share of gateway answers the proxy loses")
	flag.DurationVar(&o.provLatency, "provider-latency", 80*time.Millisecond, "provider latency, uniform up to this")
	flag.Float64Var(&o.provFail, "provider-fail-rate", 0.05, "share of provider requests answered 5xx")
	flag.Float64Var(&o.provCut, "provider-cut-rate", 0.05, "share of provider charges stored and then cut")
	flag.Float64Var(&o.provLate, "provider-late-rate", -1, "share of provider charges that land late (default 0.04; long 0.06)")
	flag.DurationVar(&o.landAfter, "land-after", 5*time.Second, "how long a late charge stays \"not found\" at the provider")
	flag.DurationVar(&o.recheckAfter, "recheck-after", 0, "the gateway's RECHECK_AFTER (default land-after + 3s; shorter than land-after - 2s to check that the audit fails)")
	flag.IntVar(&o.patientEvery, "patient-every", 7, "every n-th payment's app comes back only after -patience when answered 202 (0: none)")
	flag.IntVar(&o.abandonEvery, "abandon-every", 7, "every n-th payment's app never comes back when answered 202 (0: none)")
	flag.DurationVar(&o.patience, "patience", 0, "how long a patient app waits after a 202 (default recheck-after + 6s: past the recheck)")
	flag.BoolVar(&o.pgRestart, "pg-restart", true, "restart PostgreSQL once mid-run (pg_ctlcluster; needs root)")
	flag.IntVar(&o.instances, "instances", 3, "gateway instances behind HAProxy")
	flag.DurationVar(&o.skew, "skew", 90*time.Second, "CLOCK_SKEW of the last instance (0: none)")
	flag.StringVar(&o.haproxy, "haproxy", "", "HAProxy binary (default: haproxy on PATH, or /usr/sbin/haproxy)")
	flag.StringVar(&o.redis, "redis", "redis://127.0.0.1:6379/0", "REDIS_URL the instances share their rate limits in (empty: in memory)")
	flag.IntVar(&o.tamperEvery, "tamper-every", 0, "the proxy alters every n-th replayed answer, to check that the audit catches answers that differ (0: never)")
	flag.IntVar(&o.replays, "replays", 2, "requests a client sends again after its final answer, to compare instances' answers")
	flag.DurationVar(&o.settleWait, "settle-wait", 60*time.Second, "how long to wait for the sweeper after the clients finish")
	flag.Float64Var(&o.hookFail, "hook-fail-rate", 0.2, "share of webhook deliveries the merchants' receiver answers 500")
	flag.Float64Var(&o.hookDrop, "hook-drop-rate", 0.1, "share of webhook deliveries whose answer the receiver drops (closes the connection)")
	flag.Float64Var(&o.hookDelay, "hook-delay-rate", 0.1, "share of webhook deliveries the receiver answers late (up to 2s)")
	flag.DurationVar(&o.hookWait, "hook-wait", 2*time.Minute, "how long to wait for the last webhook deliveries after the ledger settled")
	flag.BoolVar(&o.keepLogs, "keep-logs", false, "keep the gateway and provider logs")
	flag.StringVar(&o.providerFlags, "provider-flags", "", "extra flags for the fake provider, e.g. -no-dedupe to check that the audit fails")
	flag.Float64Var(&o.refundShare, "refund-share", 0.1, "share of the payments refunded once succeeded (0: no refunds); every second one by -refund-racers keys at once")
	flag.IntVar(&o.refundRacers, "refund-racers", 3, "concurrent refund keys of a raced payment, each for 40% of it")
	flag.Float64Var(&o.provRefundFail, "provider-refund-fail-rate", 0.05, "share of refunds that end failed at the provider")
	flag.Parse()
	rig.CatchInterrupts()
	def := func(v *int, short, long int) {
		if *v == 0 {
			*v = short
			if o.long {
				*v = long
			}
		}
	}
	def(&o.merchants, 4, 8)
	def(&o.payments, 1000, 5000)
	def(&o.clients, 16, 32)
	def(&o.kills, 5, 10)
	if o.provLate < 0 {
		o.provLate = 0.04
		if o.long {
			o.provLate = 0.06
		}
	}
	if o.recheckAfter == 0 {
		o.recheckAfter = o.landAfter + 3*time.Second
	}
	if o.patience == 0 {
		o.patience = o.recheckAfter + 6*time.Second
	}

	violations, err := run(context.Background(), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos: error:", err)
		rig.Exit(2)
	}
	if violations > 0 {
		fmt.Printf("\nchaos: FAILED with %d violation(s)\n", violations)
		rig.Exit(1)
	}
	fmt.Println("\nchaos: OK — every payment charged at most once and settled, every charge succeeded in the ledger, ledger = stored answers = client answers = provider")
	rig.Exit(0)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

var start = time.Now()

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "chaos %6.1fs: %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
}

// payment is one logical payment: one key, one body, retried until final.
type payment struct {
	merchant int
	key      string
	email    string // unique per payment: the provider's audit groups by it
	decline  bool
	// patient: after a 202 the app comes back only after -patience;
	// abandon: after a 202 it never comes back.
	patient, abandon bool
	body             []byte

	// The final answer the client got.
	final    bool
	status   int
	answer   []byte
	attempts int
	replayed bool
	left     bool   // abandoned after a 202: no final answer, by design
	waited   bool   // a patient app that waited once
	problem  string // unexpected answer or timeout, if any
	// answers are every final answer (201, 402) the client got for the
	// key, the first and its replays, with the instance that sent each.
	answers []answer
	// refunds are the refunds the app makes once the payment succeeded
	// (-refund-share); launched says it made them.
	refunds  []*refund
	launched bool
}

// answer is one final answer and who sent it.
type answer struct {
	instance string
	status   int
	body     []byte
}

func run(ctx context.Context, o options) (int, error) {
	db, err := rig.CreateDatabase(ctx, o.db, "oncepay_chaos")
	if err != nil {
		return 0, err
	}
	defer func() {
		if err := db.Drop(context.Background()); err != nil {
			logf("drop database: %v", err)
		}
	}()
	dir, err := os.MkdirTemp("", "oncepay-chaos-")
	if err != nil {
		return 0, err
	}
	if o.keepLogs {
		logf("logs in %s", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	provLog, err := os.Create(filepath.Join(dir, "provider.log"))
	if err != nil {
		return 0, err
	}
	defer provLog.Close()

	// The provider: started once, never killed, so it is the witness.
	provAddr, err := rig.FreeAddr()
	if err != nil {
		return 0, err
	}
	provURL := "http://" + provAddr
	prov := &rig.Process{Bin: o.provider, Log: provLog, Health: provURL + "/_health", Args: []string{
		"-addr", provAddr, "-secret", providerSecret, "-latency", o.provLatency.String(),
		"-fail-rate", fmt.Sprint(o.provFail), "-cut-rate", fmt.Sprint(o.provCut),
		"-late-rate", fmt.Sprint(o.provLate), "-land-after", o.landAfter.String(),
		"-refund-fail-rate", fmt.Sprint(o.provRefundFail)}}
	prov.Args = append(prov.Args, strings.Fields(o.providerFlags)...)
	if err := prov.Start(); err != nil {
		return 0, err
	}
	defer prov.Kill()

	lbBin, err := haproxyBinary(o.haproxy)
	if err != nil {
		return 0, err
	}
	runID := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	base := rig.GatewayEnv(db.URL, dir)
	for k, v := range map[string]string{
		"PAYSTACK_BASE_URL": provURL,
		// The timeout stays below the lease, and the stale age above it,
		// as config demands; all short so the sweeper works during the run.
		"PROVIDER_TIMEOUT":  "1s",
		"IDEMPOTENCY_LEASE": "1500ms",
		"SWEEP_INTERVAL":    "1s",
		"SWEEP_STALE_AFTER": "2s",
		// RECHECK_AFTER is the bound on how late a provider may land a
		// charge it first said it did not have: the default 1h is the
		// real providers' bound; the fake's is -land-after. A charge
		// released as not_processed (looked up at 2–3 s, while hidden)
		// must be looked up again only after it has landed, so this is
		// land-after plus a few seconds. A recheck before the landing
		// would confirm the failure for good while the customer paid —
		// what -recheck-after shorter than land-after shows the audit
		// catching (charged-but-failed).
		"RECHECK_AFTER":    o.recheckAfter.String(),
		"REVIEW_AFTER":     "1h",
		"SHUTDOWN_TIMEOUT": "5s",
		// JSON, so the audit can read which payments the gateway re-opened.
		"LOG_FORMAT":             "json",
		"WEBHOOK_RETRY_SCHEDULE": hookRetries,
	} {
		base[k] = v
	}
	if o.redis != "" {
		// Shared limits, high enough never to refuse the run's traffic:
		// what is under test is that the Redis path serves (and falls
		// back) while instances die, not the limit itself.
		base["REDIS_URL"] = o.redis
		base["REDIS_KEY_PREFIX"] = "chaos-" + runID + ":"
		base["RATE_LIMIT_PER_SECOND"] = "100000"
		base["RATE_LIMIT_BURST"] = "100000"
	}
	instances := make([]*instance, o.instances)
	for i := range instances {
		addr, err := rig.FreeAddr()
		if err != nil {
			return 0, err
		}
		in := &instance{name: fmt.Sprintf("gw%d", i+1), addr: addr, url: "http://" + addr}
		if in.log, err = os.Create(filepath.Join(dir, in.name+".log")); err != nil {
			return 0, err
		}
		defer in.log.Close()
		env := map[string]string{}
		for k, v := range base {
			env[k] = v
		}
		env["GATEWAY_ADDR"], env["INSTANCE_ID"] = addr, in.name
		if o.skew != 0 && i == len(instances)-1 {
			// Through the development-only setting (production refuses
			// it): this instance's own clock is off; leases, staleness and
			// rechecks use the database's, tokens and updated_at follow it.
			// Unsynced (CLOCK_SYNC=false, development only), so its
			// clock stays off and stamps what it writes: tokens are
			// therefore minted by the first instance (tokenURL).
			in.skew = "+" + o.skew.String()
			env["CLOCK_SKEW"], env["CLOCK_SYNC"] = in.skew, "false"
		}
		in.proc = &rig.Process{Bin: o.gateway, Args: []string{"serve"}, Env: env, Health: in.url + "/healthz", Log: in.log}
		if err := in.proc.Start(); err != nil {
			return 0, err
		}
		defer in.proc.Kill()
		instances[i] = in
	}
	lbLog, err := os.Create(filepath.Join(dir, "haproxy.log"))
	if err != nil {
		return 0, err
	}
	defer lbLog.Close()
	lb, lbURL, err := startHAProxy(lbBin, dir, instances, lbLog)
	if err != nil {
		return 0, err
	}
	defer lb.Kill()
	// Every instance in service behind the balancer before traffic starts.
	for _, in := range instances {
		if err := waitReady(in.url, 30*time.Second); err != nil {
			return 0, fmt.Errorf("%s: %w", in.name, err)
		}
	}
	if err := waitServed(lbURL, len(instances), 30*time.Second); err != nil {
		return 0, err
	}
	gwURL := lbURL
	// Tokens come from the first instance, never the skewed one: a token
	// minted by an instance 90 s ahead is issued in the others' future,
	// and they refuse it (iat), as they should.
	tokenURL := instances[0].url

	admin := rig.Client(15 * time.Second)
	merchants := make([]*merchant, o.merchants)
	for i := range merchants {
		m, err := rig.Onboard(ctx, admin, tokenURL, map[string]any{
			"name": fmt.Sprintf("Chaos Merchant %d", i), "default_provider": "paystack",
			"providers": map[string]any{"paystack": map[string]string{"secret_key": providerSecret}},
		})
		if err != nil {
			return 0, err
		}
		merchants[i] = &merchant{Merchant: m}
	}

	// The merchants' webhook receiver, and each merchant's endpoint on it.
	hk := newHooks(o.hookFail, o.hookDrop, o.hookDelay, 2*time.Second)
	hkLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	go func() { _ = hk.serve(hkLn) }()
	defer hkLn.Close()
	for _, m := range merchants {
		if err := hk.register(ctx, admin, gwURL, "http://"+hkLn.Addr().String(), m); err != nil {
			return 0, err
		}
	}

	px := newProxy(lbURL, o.dropRate)
	px.tamperEvery = int64(o.tamperEvery)
	pxLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	go func() { _ = px.serve(pxLn) }()
	defer pxLn.Close()
	pxURL := "http://" + pxLn.Addr().String()

	pays := make([]*payment, o.payments)
	for i := range pays {
		p := &payment{merchant: i % o.merchants, key: fmt.Sprintf("chaos-%s-%05d", runID, i),
			email: fmt.Sprintf("customer%05d@chaos.example", i), decline: o.declineEvery > 0 && i%o.declineEvery == 0}
		// Offsets 5 and 3 keep the two apart when both are every 7th (and
		// let a few of them meet declines: a late decline re-opens to failed).
		p.abandon = o.abandonEvery > 0 && i%o.abandonEvery == 5%o.abandonEvery
		p.patient = !p.abandon && o.patientEvery > 0 && i%o.patientEvery == 3%o.patientEvery
		method := "AUTH_success"
		if p.decline {
			method = "AUTH_decline"
		}
		if every := int(1/max(o.refundShare, 1e-9) + 0.5); o.refundShare > 0 && i%every == 1%every {
			// Every second refunded payment is raced.
			racers := o.refundRacers
			if (i/every)%2 == 1 {
				racers = 1
			}
			p.refunds = refundsOf(runID, i, racers, p, int64(1000+i))
		}
		p.body = fmt.Appendf(nil, `{"amount":%d,"currency":"NGN","email":%q,"payment_method":%q,"description":"chaos %d"}`,
			1000+i, p.email, method, i)
		pays[i] = p
	}
	logf("%d payments, %d merchants, %d clients, %d instances behind HAProxy (%s), proxy drop %.0f%%, provider latency ≤%s fail %.0f%% cut %.0f%% late %.0f%% (lands after %s; RECHECK_AFTER %s), %d instance kills, PostgreSQL restart %v, Redis %q",
		o.payments, o.merchants, o.clients, len(instances), describe(instances), 100*o.dropRate, o.provLatency, 100*o.provFail, 100*o.provCut,
		100*o.provLate, o.landAfter, o.recheckAfter, o.kills, o.pgRestart, o.redis)

	// Clients.
	var done atomic.Int64
	work := make(chan *payment)
	var wg sync.WaitGroup
	cl := &client{base: pxURL, http: rig.Client(20 * time.Second), merchants: merchants, gwURL: tokenURL, replays: o.replays}
	// A succeeded payment's refunds run beside the other payments.
	refundSlots := make(chan struct{}, o.clients)
	refundAfter := func(p *payment) {
		if len(p.refunds) == 0 || !p.final || p.status != http.StatusCreated {
			return
		}
		var a answerView
		if json.Unmarshal(p.answer, &a) != nil {
			return
		}
		id, status := a.payment()
		if status != "succeeded" {
			return
		}
		p.launched = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			refundSlots <- struct{}{}
			defer func() { <-refundSlots }()
			cl.refundPayment(ctx, id, p.refunds)
		}()
	}
	for range o.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range work {
				if cl.settle(ctx, p) {
					// A patient app: it comes back later on its own, so
					// its wait does not hold up the other payments.
					wg.Add(1)
					go func() {
						defer wg.Done()
						time.Sleep(o.patience)
						cl.settle(ctx, p)
						refundAfter(p)
						done.Add(1)
					}()
					continue
				}
				refundAfter(p)
				done.Add(1)
			}
		}()
	}
	go func() {
		for _, p := range pays {
			work <- p
		}
		close(work)
	}()

	// Faults, triggered by progress so they always land mid-traffic
	// whatever the machine's speed.
	var violations []string
	var vmu sync.Mutex
	violate := func(format string, args ...any) {
		vmu.Lock()
		defer vmu.Unlock()
		violations = append(violations, fmt.Sprintf(format, args...))
	}
	type event struct {
		at   int
		kind string
	}
	var events []event
	for k := 1; k <= o.kills; k++ {
		events = append(events, event{o.payments * k / (o.kills + 1), "kill"})
	}
	if o.pgRestart {
		events = append(events, event{o.payments * 9 / 20, "pg"})
	}
	sort.Slice(events, func(i, j int) bool { return events[i].at < events[j].at })
	kills, pgRestarts := 0, 0
	killed := map[string]int{}
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		for _, ev := range events {
			for done.Load() < int64(ev.at) {
				if done.Load() >= int64(o.payments) {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
			switch ev.kind {
			case "kill":
				// One instance at a time, in turn (the skewed one too);
				// the others serve meanwhile.
				in := instances[kills%len(instances)]
				in.proc.Kill()
				kills++
				killed[in.name]++
				logf("%s SIGKILLed at %d/%d payments done", in.name, done.Load(), o.payments)
				time.Sleep(time.Duration(rand.IntN(500)) * time.Millisecond)
				if err := in.proc.Start(); err != nil {
					violate("%s did not restart after a kill: %v", in.name, err)
					return
				}
				logf("%s restarted", in.name)
			case "pg":
				logf("restarting PostgreSQL at %d/%d payments done", done.Load(), o.payments)
				if err := restartPostgres(ctx, o.db); err != nil {
					violate("PostgreSQL restart: %v", err)
					continue
				}
				pgRestarts++
				logf("PostgreSQL is back")
				// Every instance must ride it out: same process, ready again.
				for _, in := range instances {
					select {
					case <-in.proc.Exited():
						violate("%s exited during the PostgreSQL restart", in.name)
						if err := in.proc.Start(); err != nil {
							violate("%s did not restart: %v", in.name, err)
							return
						}
					default:
					}
					if err := waitReady(in.url, 30*time.Second); err != nil {
						violate("%s not ready after the PostgreSQL restart: %v", in.name, err)
					}
				}
			}
		}
	}()

	wg.Wait()
	<-faultsDone
	logf("all clients have a final answer or gave up; %d kills %v, %d PostgreSQL restarts; proxy forwarded %d, dropped %d, 502/503 while down %d",
		kills, killed, pgRestarts, px.forwarded.Load(), px.dropped.Load(), px.failed.Load())
	for _, in := range instances {
		select {
		case <-in.proc.Exited():
			violate("%s is not running at the end", in.name)
			if err := in.proc.Start(); err != nil {
				return 0, err
			}
		default:
		}
	}
	select {
	case <-lb.Exited():
		violate("HAProxy is not running at the end")
	default:
	}

	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	// The sweeper finishes what the clients did not need to (the
	// abandoned apps' payments) and the rechecks still due (payments
	// released as not_processed, whose charge may yet be found); bounded.
	settleStart := time.Now()
	deadline := settleStart.Add(o.settleWait)
	for {
		var open, unsettled, rechecks, refunding int
		if err := conn.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM idempotency_keys WHERE status = 'in_progress'),
			(SELECT count(*) FROM payments WHERE status NOT IN ('succeeded', 'failed')),
			(SELECT count(*) FROM payments WHERE recheck_at IS NOT NULL),
			(SELECT count(*) FROM refunds WHERE status = 'pending')`).Scan(&open, &unsettled, &rechecks, &refunding); err != nil {
			return 0, err
		}
		if open == 0 && unsettled == 0 && rechecks == 0 && refunding == 0 {
			logf("settled %.1fs after the clients", time.Since(settleStart).Seconds())
			break
		}
		if time.Now().After(deadline) {
			logf("after %s: %d keys in progress, %d payments unsettled, %d rechecks pending, %d refunds pending", o.settleWait, open, unsettled, rechecks, refunding)
			break
		}
		time.Sleep(500 * time.Millisecond)
	}

	logs := make([]string, len(instances))
	for i, in := range instances {
		logs[i] = in.log.Name()
	}
	rep, err := audit(ctx, conn, provURL, merchants, pays, logs)
	if err != nil {
		return 0, err
	}
	violations = append(violations, rep.violations...)
	var refunds []*refund
	for _, p := range pays {
		if p.launched {
			refunds = append(refunds, p.refunds...)
		}
	}
	if o.refundShare > 0 {
		// The provider's refunds settle within its -refund-process (1s).
		time.Sleep(1500 * time.Millisecond)
	}
	frep, err := auditRefunds(ctx, conn, provURL, merchants, refunds)
	if err != nil {
		return 0, err
	}
	violations = append(violations, frep.violations...)
	if left, err := waitDelivered(ctx, conn, o.hookWait); err != nil {
		return 0, err
	} else if left > 0 {
		logf("after %s: %d webhook deliveries still pending", o.hookWait, left)
	}
	hrep, err := auditEvents(ctx, conn, hk)
	if err != nil {
		return 0, err
	}
	violations = append(violations, hrep.violations...)
	rep.print(o, instances, killed, kills, pgRestarts, px)
	frep.print(o.refundShare, o.refundRacers)
	hrep.print(hk)
	for i, v := range violations {
		if i == 50 {
			fmt.Printf("  … and %d more\n", len(violations)-50)
			break
		}
		fmt.Println("  VIOLATION:", v)
	}
	return len(violations), nil
}

// restartPostgres restarts the local cluster and waits until it accepts
// connections again.
func restartPostgres(ctx context.Context, dbURL string) error {
	vers, err := os.ReadDir("/etc/postgresql")
	if err != nil || len(vers) == 0 {
		return fmt.Errorf("no cluster under /etc/postgresql: %v", err)
	}
	out, err := exec.CommandContext(ctx, "pg_ctlcluster", "--skip-systemctl-redirect", vers[0].Name(), "main", "restart").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctlcluster restart: %v: %s", err, out)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := pgx.Connect(ctx, dbURL)
		if err == nil {
			c.Close(ctx)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("PostgreSQL did not come back: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// describe names the instances and the skewed one's clock.
func describe(instances []*instance) string {
	var parts []string
	for _, in := range instances {
		if in.skew != "" {
			parts = append(parts, in.name+" clock "+in.skew)
		} else {
			parts = append(parts, in.name)
		}
	}
	return strings.Join(parts, ", ")
}

// waitServed waits until the load balancer has sent requests to n
// distinct instances (its health checks have put them all in service).
func waitServed(lb string, n int, d time.Duration) error {
	deadline := time.Now().Add(d)
	seen := map[string]bool{}
	for len(seen) < n {
		resp, err := http.Get(lb + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				seen[resp.Header.Get(instanceHeader)] = true
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the load balancer served only %d of %d instances: %v", len(seen), n, seen)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

func waitReady(base string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("readyz %d", resp.StatusCode)
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// merchant is an onboarded tenant whose token a client refreshes on 401.
type merchant struct {
	rig.Merchant
	mu sync.Mutex
}

func (m *merchant) token() string { m.mu.Lock(); defer m.mu.Unlock(); return m.Token }

// client is the merchant's app: one payment at a time, same key, same
// body, retried until the answer is final.
type client struct {
	base      string // the proxy
	gwURL     string // for token refreshes, which are not under test: the first instance
	http      *http.Client
	merchants []*merchant
	attempts  atomic.Int64
	replays   int // requests sent again after a final answer
}

// giveUp bounds one payment: far beyond any lease, sweep or restart.
const giveUp = 90 * time.Second

// settle makes one payment's requests until it has a final answer, gives
// up, or (later) a patient app stops at a 202 to come back after
// -patience: the caller then calls settle again.
func (c *client) settle(ctx context.Context, p *payment) (later bool) {
	m := c.merchants[p.merchant]
	stop := time.Now().Add(giveUp)
	for time.Now().Before(stop) {
		p.attempts++
		c.attempts.Add(1)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/payments", bytes.NewReader(p.body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+m.token())
		req.Header.Set("Idempotency-Key", p.key)
		resp, err := c.http.Do(req)
		if err != nil {
			sleep(100, 300) // lost answer or a dead gateway: same key again
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			sleep(100, 300)
			continue
		}
		switch s := resp.StatusCode; {
		case s == http.StatusCreated || s == http.StatusPaymentRequired:
			p.final, p.status, p.answer = true, s, body
			p.replayed = resp.Header.Get("Idempotent-Replayed") == "true"
			p.answers = append(p.answers, answer{resp.Header.Get(instanceHeader), s, body})
			c.again(ctx, p)
			return
		case s == http.StatusAccepted: // outcome unknown yet
			switch {
			case p.abandon:
				// The app gives up on the payment: the gateway alone must
				// settle it (sweeper, recheck).
				p.left = true
				return
			case p.patient && !p.waited:
				// Back only once the recheck is due (the caller calls
				// settle again after -patience): the payment, if released
				// as not_processed meanwhile, has been re-opened.
				p.waited = true
				return true
			default:
				sleep(200, 400)
			}
		case s == http.StatusConflict: // in use: the owner or its lease still runs
			sleep(300, 700)
		case s == http.StatusUnauthorized:
			m.mu.Lock()
			if tok, err := rig.Token(ctx, c.http, c.gwURL, m.ClientID, m.ClientSecret); err == nil {
				m.Token = tok
			}
			m.mu.Unlock()
			sleep(100, 300)
		case s == http.StatusTooManyRequests || s >= 500:
			sleep(100, 300)
		default:
			p.problem = fmt.Sprintf("unexpected answer %d: %.200s", s, body)
			return
		}
	}
	p.problem = fmt.Sprintf("no final answer after %s and %d attempts", giveUp, p.attempts)
	return false
}

// again sends p's request c.replays more times after its final answer,
// through the same proxy and balancer (so mostly to other instances), and
// keeps each final answer with the instance that sent it: every one must
// be byte for byte the first. Lost answers and dead instances are retried;
// a replay is never a new payment.
func (c *client) again(ctx context.Context, p *payment) {
	m := c.merchants[p.merchant]
	for got, tries := 0, 0; got < c.replays && tries < 10*c.replays; tries++ {
		c.attempts.Add(1)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/payments", bytes.NewReader(p.body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+m.token())
		req.Header.Set("Idempotency-Key", p.key)
		resp, err := c.http.Do(req)
		if err != nil {
			sleep(50, 150)
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			sleep(50, 150)
			continue
		}
		switch s := resp.StatusCode; {
		case s == http.StatusCreated || s == http.StatusPaymentRequired:
			p.answers = append(p.answers, answer{resp.Header.Get(instanceHeader), s, body})
			got++
		case s == http.StatusUnauthorized:
			m.mu.Lock()
			tok, err := rig.Token(ctx, c.http, c.gwURL, m.ClientID, m.ClientSecret)
			if err == nil {
				m.Token = tok
			}
			m.mu.Unlock()
			if err != nil {
				sleep(50, 150) // the token's instance is down (killed in turn)
			}
		case s == http.StatusTooManyRequests || s >= 500:
			sleep(50, 150)
		default:
			// Any other answer after a final one is a different answer.
			p.answers = append(p.answers, answer{resp.Header.Get(instanceHeader), s, body})
			got++
		}
	}
}

func sleep(minMS, maxMS int) {
	time.Sleep(time.Duration(minMS+rand.IntN(maxMS-minMS)) * time.Millisecond)
}
