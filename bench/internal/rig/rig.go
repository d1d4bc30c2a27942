// Package rig is what the bench programs (bench/load, bench/chaos) share: a
// throwaway PostgreSQL database, the real gateway binary run as a child
// process, and the admin/auth calls that onboard a merchant. It is not a
// test helper (apptest needs a testing.TB): these are plain programs run by
// `make bench` and `make chaos`.
package rig

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// AdminKey is the admin API key every rig gateway runs with.
const AdminKey = "bench-admin-key-0123456789abcdef"

// DefaultDatabaseURL is the server the rig creates its database on, as in
// the tests (TEST_DATABASE_URL).
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// Database is a database created for one run and dropped after it, so a
// run never sees another's rows and leaves nothing behind.
type Database struct {
	Name  string
	URL   string // connection URL of the new database
	admin string // URL of the database it was created from
	// dropped unregisters its drop on interrupt (CatchInterrupts).
	dropped func()
}

// CreateDatabase creates an empty database next to the one adminURL names,
// named prefix_<unix seconds>_<random>. It first drops the databases of
// earlier runs with the same prefix that are older than staleAfter: a run
// that was killed (SIGKILL, a lost terminal) could not drop its own.
func CreateDatabase(ctx context.Context, adminURL, prefix string) (*Database, error) {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := fmt.Sprintf("%s_%d_%s", prefix, time.Now().Unix(), hex.EncodeToString(b))
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return nil, fmt.Errorf("rig: connect %s: %w", redact(adminURL), err)
	}
	defer conn.Close(ctx)
	dropStale(ctx, conn, prefix, time.Now().Add(-staleAfter))
	u, err := url.Parse(adminURL)
	if err != nil {
		return nil, err
	}
	u.Path = "/" + name
	d := &Database{Name: name, URL: u.String(), admin: adminURL}
	// Registered before it exists (dropping one that does not is
	// harmless), so an interrupt never finds it created and unregistered.
	if d.dropped, err = register(func() error { return nil }, dropOnInterrupt(d)); err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		d.dropped()
		return nil, fmt.Errorf("rig: create database: %w", err)
	}
	return d, nil
}

// staleAfter is when a rig database is surely left over: no run takes an
// hour, and one running concurrently is never that old.
const staleAfter = time.Hour

// dropStale drops prefix_<unix>_<hex> databases created before cutoff.
// Failing to is not an error of this run: it is reported and skipped.
func dropStale(ctx context.Context, conn *pgx.Conn, prefix string, cutoff time.Time) {
	rows, err := conn.Query(ctx, "SELECT datname FROM pg_database WHERE datname LIKE $1", prefix+`\_%`)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rig: list old databases:", err)
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		fmt.Fprintln(os.Stderr, "rig: list old databases:", err)
		return
	}
	for _, n := range names {
		if created, ok := createdAt(n, prefix); ok && created.Before(cutoff) {
			if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{n}.Sanitize()+" WITH (FORCE)"); err != nil {
				fmt.Fprintln(os.Stderr, "rig: drop old database:", err)
				continue
			}
			fmt.Fprintln(os.Stderr, "rig: dropped", n, "left over by an earlier run")
		}
	}
}

// createdAt reads the creation time out of a rig database's name; ok is
// false for a name the rig did not make.
func createdAt(name, prefix string) (time.Time, bool) {
	rest, found := strings.CutPrefix(name, prefix+"_")
	if !found {
		return time.Time{}, false
	}
	secs, suffix, found := strings.Cut(rest, "_")
	if !found || len(suffix) != 8 {
		return time.Time{}, false
	}
	if _, err := hex.DecodeString(suffix); err != nil {
		return time.Time{}, false
	}
	unix, err := strconv.ParseInt(secs, 10, 64)
	if err != nil || unix <= 0 {
		return time.Time{}, false
	}
	return time.Unix(unix, 0), true
}

// Drop removes the database, closing any connection still open on it.
func (d *Database) Drop(ctx context.Context) error {
	err := d.drop(ctx)
	if err == nil && d.dropped != nil {
		d.dropped() // until then an interrupt drops it (again: harmless)
	}
	return err
}

func (d *Database) drop(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, d.admin)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+d.Name+" WITH (FORCE)")
	return err
}

// Analyze runs ANALYZE on the database, standing in for autovacuum's
// first analyze. This machine's PostgreSQL runs with autovacuum off, so a
// run's fresh tables are never analyzed, and a generic plan a connection
// caches while the payments table holds a few hundred rows can pick an
// index that names only merchant_id (payments_email_idx ties with the
// primary key then) and keep it for the whole run: each completion then
// walks the merchant's payments (20–36 ms each, measured). In production
// autovacuum analyzes within a naptime and the ANALYZE invalidates such
// plans; a benchmark that skipped it would measure that accident, not the
// gateway. Call it after the warmup, before anything is measured.
func (d *Database) Analyze(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, d.URL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "ANALYZE")
	return err
}

func redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(bad url)"
	}
	return p.Redacted()
}

// GatewayEnv is the environment of a rig gateway on dbURL: fixed secrets
// (so tokens survive a restart), no rate limit, quiet logs. Callers add or
// override settings.
func GatewayEnv(dbURL, dataDir string) map[string]string {
	return map[string]string{
		"GATEWAY_ENV":           "development",
		"DATA_DIR":              dataDir,
		"DATABASE_URL":          dbURL,
		"ADMIN_API_KEY":         AdminKey,
		"JWT_SECRET":            "bench-jwt-secret-0123456789abcdef0123456789",
		"MASTER_KEY":            "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
		"LOG_LEVEL":             "warn",
		"RATE_LIMIT_PER_SECOND": "0",
		"SIMULATOR_LATENCY":     "0s",
	}
}

// FreeAddr returns a loopback address nothing listens on right now.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// Process is a child process (the gateway or the fake provider) that can be
// killed and started again on the same address with the same environment.
type Process struct {
	Bin  string
	Args []string
	Env  map[string]string
	// Health is the URL polled until it answers 200 after a start.
	Health string
	// Log receives the child's stdout and stderr (appended across restarts).
	Log io.Writer

	cmd  *exec.Cmd
	done chan struct{}
}

// childEnv is a child's whole environment: PATH, HOME and env. The Go
// runtime's knobs reach the child only when asked for with a RIG_ prefix
// (RIG_GOGC=100 make bench), and nothing else of the rig's environment
// does, so the rig's own settings never leak into what is measured, or
// into a gateway's configuration, by accident.
func childEnv(env map[string]string) []string {
	out := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for _, k := range []string{"GOMAXPROCS", "GOGC", "GOMEMLIMIT", "AUTOMEMLIMIT", "GODEBUG"} {
		if v, ok := os.LookupEnv("RIG_" + k); ok {
			out = append(out, k+"="+v)
		}
	}
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// Run runs bin to its end, with a Process's environment (childEnv), for
// at most timeout, and returns what it wrote to stdout and stderr. An
// interrupt kills it, as it stops a Process.
func Run(bin string, args []string, env map[string]string, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = childEnv(env)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	done := make(chan struct{})
	exited, err := register(cmd.Start, func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
	})
	if err != nil {
		return nil, fmt.Errorf("rig: run %s: %w", bin, err)
	}
	err = cmd.Wait()
	exited()
	close(done)
	if err != nil {
		return out.Bytes(), fmt.Errorf("rig: run %s: %w", bin, err)
	}
	return out.Bytes(), nil
}

// Start runs the process and waits up to 30s for Health to answer 200.
func (p *Process) Start() error {
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Env = childEnv(p.Env)
	cmd.Stdout, cmd.Stderr = p.Log, p.Log
	done := make(chan struct{})
	exited, err := register(cmd.Start, func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
	})
	if err != nil {
		return fmt.Errorf("rig: start %s: %w", p.Bin, err)
	}
	p.cmd, p.done = cmd, done
	go func() { _ = cmd.Wait(); exited(); close(done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-p.done:
			return fmt.Errorf("rig: %s exited at start (%s)", p.Bin, cmd.ProcessState)
		default:
		}
		if p.Health == "" {
			return nil
		}
		resp, err := http.Get(p.Health)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("rig: %s did not become healthy at %s", p.Bin, p.Health)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Pid is the process id of the current run (0 before Start).
func (p *Process) Pid() int {
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Exited is closed when the current run of the process has ended.
func (p *Process) Exited() <-chan struct{} { return p.done }

// Kill ends the process with SIGKILL — a power cut: no drain, no cleanup —
// and waits for it.
func (p *Process) Kill() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop asks the process to shut down (SIGTERM) and waits up to 30s before
// killing it.
func (p *Process) Stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.Kill()
	}
}

// Client is an HTTP client with enough idle connections for many
// concurrent callers (the default keeps two per host, which would make the
// benchmark measure connection set-up).
func Client(timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, IdleConnTimeout: time.Minute,
		},
	}
}

// Merchant is an onboarded tenant and its current access token.
type Merchant struct {
	ID, ClientID, ClientSecret, Token string
}

// Onboard creates a tenant through the admin API (body as
// POST /admin/v1/tenants takes it) and fetches its first token.
func Onboard(ctx context.Context, c *http.Client, base string, body map[string]any) (Merchant, error) {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/admin/v1/tenants", bytes.NewReader(b))
	if err != nil {
		return Merchant{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+AdminKey)
	resp, err := c.Do(req)
	if err != nil {
		return Merchant{}, fmt.Errorf("rig: onboard: %w", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		return Merchant{}, fmt.Errorf("rig: onboard: %d %s", resp.StatusCode, raw)
	}
	var out struct {
		ID           string `json:"id"`
		ClientID     string `json:"client_id"`
		ClientSecret string `json:"client_secret"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return Merchant{}, fmt.Errorf("rig: onboard answer: %w", err)
	}
	m := Merchant{ID: out.ID, ClientID: out.ClientID, ClientSecret: out.ClientSecret}
	m.Token, err = Token(ctx, c, base, m.ClientID, m.ClientSecret)
	return m, err
}

// Token exchanges client credentials for an access token.
func Token(ctx context.Context, c *http.Client, base, clientID, secret string) (string, error) {
	form := url.Values{"grant_type": {"client_credentials"}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/auth/token", strings.NewReader(form))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(clientID+":"+secret)))
	resp, err := c.Do(req)
	if err != nil {
		return "", fmt.Errorf("rig: token: %w", err)
	}
	defer resp.Body.Close()
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&tok) != nil || tok.AccessToken == "" {
		return "", fmt.Errorf("rig: token: status %d", resp.StatusCode)
	}
	return tok.AccessToken, nil
}
