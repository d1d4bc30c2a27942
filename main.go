// Command gateway is the OncePay payments gateway.
//
//	gateway [serve]   run the HTTP API and the background jobs (default)
//	gateway migrate   apply the database migrations and exit
//
// Every setting comes from the environment; see config/ and the README.
package main

// Swagger general API info (swaggo/swag). `make docs` generates docs/ from
// these lines and the annotations on the handlers; never edit docs/ by hand.
// The x-oas3-… extensions say what Swagger 2.0 cannot (a bearer scheme);
// docs/oas3gen applies them when it writes docs/openapi.json.
//
//	@title						OncePay Gateway API
//	@version					1.0
//	@description				Multi-tenant payments gateway. Merchants' apps charge their customers through a payment provider; a retried payment is charged at most once and every accepted payment reaches a known final state.
//	@description
//	@description				**Idempotency.** Every mutating merchant route (POST /v1/payments) requires an `Idempotency-Key` header: one key per logical payment, 1 to 255 printable ASCII characters, scoped to the merchant. Retry with the same key and the byte-identical body until you get a final answer: a finished request is replayed byte for byte with `Idempotent-Replayed: true`; a retry while the first request still runs is 409 `idempotency_key_in_use` with `Retry-After`; the same key with another body is 422 `idempotency_key_mismatch`; 202 means the outcome is not known yet (retry with the same key, or poll `Location`).
//	@description
//	@description				**Errors** are RFC 9457 `application/problem+json` with a stable `code`; switch on `code`, never on `detail`. **Money** is an integer amount in minor units (kobo, cents) with an ISO 4217 currency.
//	@description
//	@description				**Auth.** Admins use `Authorization: Bearer <ADMIN_API_KEY>` (AdminKey). Merchants exchange their client credentials at `POST /v1/auth/token` (client-credentials grant; HTTP Basic or `client_id` and `client_secret` in the form) for a short-lived JWT and send it as `Authorization: Bearer <token>` (BearerAuth).
//	@description
//	@description				**Ids.** An object's id is its type's prefix and 32 hex digits (`pay_…`, `re_…`, `evt_…`, `we_…`). Treat it as an opaque string: it is a time-ordered UUID, so it shows when the object was made (as `created_at` does), but no order of ids is promised; lists are ordered by `created_at`.
//	@description
//	@description				**Request ids.** Every answer carries `X-Request-Id`, also in problem bodies as `request_id`: the client's own `X-Request-Id` when it is 1 to 128 visible ASCII characters, else one the gateway made. Quote it to support.
//	@contact.name				OncePay
//	@BasePath					/
//	@schemes					http https
//
//	@securityDefinitions.apikey	BearerAuth
//	@in							header
//	@name						Authorization
//	@description				Merchant access token from `POST /v1/auth/token`, sent as `Authorization: Bearer <token>`. In Swagger UI's Authorize dialog paste the `access_token` alone.
//	@x-oas3-http-scheme			bearer
//	@x-oas3-bearer-format		JWT
//
//	@securityDefinitions.apikey	AdminKey
//	@in							header
//	@name						Authorization
//	@description				The gateway's `ADMIN_API_KEY`, sent as `Authorization: Bearer <key>`. In Swagger UI's Authorize dialog paste the key alone.
//	@x-oas3-http-scheme			bearer
//
//	@securityDefinitions.basic	ClientBasic
//
//	@tag.name					payments
//	@tag.description			Create, get and list a merchant's payments. Creating is idempotent per Idempotency-Key.
//	@tag.name					refunds
//	@tag.description			Refund a succeeded payment, all or in parts, idempotent per Idempotency-Key; the refunds never exceed the payment.
//	@tag.name					auth
//	@tag.description			Client-credentials grant: client_id and client_secret for a short-lived access token. With HTTP Basic (ClientBasic) the client_id is the username and the client_secret the password.
//	@tag.name					merchant
//	@tag.description			The authenticated merchant.
//	@tag.name					admin
//	@tag.description			Onboarding and managing tenants (ADMIN_API_KEY).
//	@tag.name					webhooks
//	@tag.description			Provider callbacks, authenticated by the provider's signature.
//	@tag.name					health
//	@tag.description			Liveness and readiness probes.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/oncepay/gateway/app"
	"github.com/oncepay/gateway/app/database"
	"github.com/oncepay/gateway/app/gctune"
	"github.com/oncepay/gateway/config"
	"github.com/oncepay/gateway/events"
)

func main() {
	cmd := "serve"
	if len(os.Args) > 1 {
		cmd = os.Args[1]
	}
	var err error
	switch cmd {
	case "serve":
		err = serve()
	case "migrate":
		err = migrate()
	case "reseal":
		err = reseal()
	case "-h", "--help", "help":
		fmt.Println("usage: gateway [serve|migrate|reseal]")
		return
	default:
		err = fmt.Errorf("unknown command %q (want serve, migrate or reseal)", cmd)
	}
	if err != nil {
		report(os.Stderr, cmd, err)
		os.Exit(1)
	}
}

// report says why a command failed: through the logger once the
// configuration has loaded, so a database that cannot be reached at start
// is a line in the format the log collector reads, not a bare line among
// JSON ones; on w when the configuration itself is wrong.
func report(w io.Writer, cmd string, err error) {
	if started != nil {
		started.Error("gateway stopped", "command", cmd, "err", err)
		return
	}
	fmt.Fprintln(w, "gateway:", err)
}

// started is the logger once the configuration has loaded.
var started *slog.Logger

func load() (config.Config, *slog.Logger, error) {
	cfg, err := config.Load()
	if err != nil {
		return cfg, nil, err
	}
	started = newLogger(cfg, os.Stderr)
	return cfg, started, nil
}

func newLogger(cfg config.Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Log.Level))
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if cfg.Log.Format == "json" {
		opts.ReplaceAttr = millis
		h = slog.NewJSONHandler(w, opts)
	}
	log := slog.New(h).With("instance", cfg.Instance)
	slog.SetDefault(log)
	return log
}

// millis writes a duration in a JSON log as milliseconds, its key ending
// in _ms ("latency_ms":12.345): slog's JSON handler would write
// nanoseconds under the bare key, which a person reading an incident's
// logs has to count the digits of. The text format already writes
// "latency=12.345ms".
func millis(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() != slog.KindDuration {
		return a
	}
	return slog.Float64(a.Key+"_ms", float64(a.Value.Duration().Microseconds())/1000)
}

func migrate() error {
	cfg, log, err := load()
	if err != nil {
		return err
	}
	db, err := database.Open(cfg.DatabaseURL(), database.Options{MaxOpenConns: 2})
	if err != nil {
		return err
	}
	defer database.Close(db)
	n, err := database.Migrate(db)
	if err != nil {
		return err
	}
	// River's tables too, so a deploy step that migrates leaves nothing
	// for the instances to create.
	if err := events.MigrateQueue(context.Background(), db, log); err != nil {
		return err
	}
	log.Info("migrations applied", "applied", n, "schema_version", database.Version())
	return nil
}

// reseal is the second step of a MASTER_KEY rotation (README, "Rotating
// MASTER_KEY"): every secret sealed under MASTER_KEY_PREVIOUS is sealed
// again under MASTER_KEY. It fails when something opens under neither key,
// so a deploy script notices.
func reseal() error {
	cfg, log, err := load()
	if err != nil {
		return err
	}
	if len(cfg.Secrets.Generated) > 0 && contains(cfg.Secrets.Generated, "MASTER_KEY") {
		return errors.New("reseal: MASTER_KEY is not set (development generated one); set MASTER_KEY and MASTER_KEY_PREVIOUS")
	}
	if len(cfg.Secrets.MasterKeyPrevious) == 0 {
		log.Warn("MASTER_KEY_PREVIOUS is not set: nothing can be moved, only checked")
	}
	rep, err := app.Reseal(context.Background(), cfg, log)
	if err != nil {
		return err
	}
	// The report is the command's answer: printed whatever LOG_LEVEL is.
	fmt.Printf("resealed under MASTER_KEY: provider_accounts=%d webhook_endpoints=%d stored_answers=%d\n",
		rep.Accounts, rep.Endpoints, rep.Answers)
	fmt.Printf("client secrets not known to be hashed under MASTER_KEY: stale_client_secret_hashes=%d\n", rep.StaleHashes)
	for _, a := range rep.UnreadableAccounts {
		fmt.Printf("opens under neither key: provider account %s (set its secrets again)\n", a)
	}
	for _, e := range rep.UnreadableEndpoints {
		fmt.Printf("opens under neither key: webhook endpoint %s (rotate its secret)\n", e)
	}
	if rep.UnreadableAnswers > 0 {
		fmt.Printf("opens under neither key: %d stored answers (refused on replay until purged with their keys)\n", rep.UnreadableAnswers)
	}
	switch {
	case len(rep.UnreadableAccounts)+len(rep.UnreadableEndpoints)+rep.UnreadableAnswers > 0:
		return errors.New("reseal: some secrets open under neither MASTER_KEY nor MASTER_KEY_PREVIOUS (listed above)")
	case len(cfg.Secrets.MasterKeyPrevious) == 0 && !rep.Retirable():
		// A check only: no previous key to keep or remove, but clients
		// whose hash names another key cannot get a token if that key was
		// the one removed (those from before key ids were recorded still
		// can, if hashed under this one: they are recorded at their next).
		fmt.Println("check: if MASTER_KEY_PREVIOUS was removed before these clients asked for a token, rotate their credentials")
	case len(cfg.Secrets.MasterKeyPrevious) == 0:
		fmt.Println("check: every sealed secret opens under MASTER_KEY")
	case !rep.Retirable():
		fmt.Println("keep MASTER_KEY_PREVIOUS: each stale client secret is rehashed at its next token request (or rotate those credentials)")
	default:
		fmt.Println("MASTER_KEY_PREVIOUS can be removed")
	}
	return nil
}

// sharedStoreSecrets refuses to serve a PostgreSQL database with secrets
// development generated: they are this instance's own (its DATA_DIR's), so
// a second instance on the database could open none of the first's sealed
// provider secrets nor accept its tokens — the mark of a deployment that
// forgot GATEWAY_ENV=production, whose admin key would be printed to the
// log collector besides.
func sharedStoreSecrets(cfg config.Config) error {
	if !cfg.Database.Postgres() || len(cfg.Secrets.Generated) == 0 {
		return nil
	}
	return fmt.Errorf("DATABASE_URL is a PostgreSQL database, which instances share, but %s were generated for this instance alone: "+
		"set them in the environment (and GATEWAY_ENV=production for a deployment), or leave DATABASE_URL unset for the embedded store",
		strings.Join(cfg.Secrets.Generated, ", "))
}

func serve() error {
	cfg, log, err := load()
	if err != nil {
		return err
	}
	if err := sharedStoreSecrets(cfg); err != nil {
		return err
	}
	if len(cfg.Secrets.Generated) > 0 {
		msg := "development mode: using the development secrets kept in the data directory (unchanged since they were generated); set them in the environment for production"
		if cfg.Secrets.GeneratedNow {
			msg = "development mode: generated new secrets and kept them in the data directory; set them in the environment for production"
		}
		log.Warn(msg, "secrets", cfg.Secrets.Generated, "kept_in", cfg.Secrets.GeneratedFile)
		if contains(cfg.Secrets.Generated, "ADMIN_API_KEY") {
			// Printed once per start, to the terminal, never to the log.
			fmt.Fprintf(os.Stdout, "\n  Admin API key (development): %s\n\n", cfg.Secrets.AdminAPIKey.Reveal())
		}
	}
	gcOpts := gctune.Options{GOGC: cfg.GC.GOGC, GOMEMLIMIT: cfg.GC.GOMEMLIMIT, Ratio: cfg.GC.MemoryRatio}
	gc := gctune.Apply(gcOpts)
	logGC(log, gc)
	store := "sqlite"
	if cfg.Database.Postgres() {
		store = "postgres"
	}
	a, err := app.New(cfg, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		_ = a.Close()
		return err
	}
	log.Info("gateway listening", "addr", ln.Addr().String(), "env", cfg.Env, "store", store)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go gctune.Watch(ctx, gcOpts, gc, gctune.RefreshEvery, func(s gctune.Settings) {
		log.Info("memory limit changed; the garbage collector follows")
		logGC(log, s)
	})
	return a.Serve(ctx, ln)
}

// logGC says what the garbage collector runs with: an instance's memory
// use follows from it (README, "Configuration").
func logGC(log *slog.Logger, gc gctune.Settings) {
	limit := "none"
	if gc.Limit > 0 && gc.Limit < math.MaxInt64 {
		limit = fmt.Sprintf("%d MiB", gc.Limit>>20)
	}
	if gc.LimitErr != nil {
		log.Warn("memory limit unknown; the garbage collector keeps the runtime's defaults", "err", gc.LimitErr)
	}
	log.Info("garbage collector", "gogc", gc.Percent, "gogc_from", gc.PercentFrom,
		"memory_limit", limit, "memory_limit_from", gc.LimitFrom)
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
