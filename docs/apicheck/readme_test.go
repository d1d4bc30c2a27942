package apicheck_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/apptest"
)

// repoRoot is the gateway's checkout (this module is docs/apicheck in it).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(root, "README.md"))
	return root
}

// skipMarker, on the line before a fence, keeps a block out of the run.
const skipMarker = "<!-- readme-test: skip"

// codeBlock is a fenced block of a Markdown file.
type codeBlock struct {
	Line int // of its opening fence
	Code string
}

// fencedBlocks are the blocks fenced as ```lang, but those after a
// skipMarker line.
func fencedBlocks(t *testing.T, path, lang string) []codeBlock {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var blocks []codeBlock
	var cur *codeBlock
	prev, n := "", 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		n++
		switch {
		case cur != nil && strings.TrimSpace(line) == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.Code += line + "\n"
		case strings.TrimSpace(line) == "```"+lang && !strings.HasPrefix(strings.TrimSpace(prev), skipMarker):
			cur = &codeBlock{Line: n}
		}
		if strings.TrimSpace(line) != "" {
			prev = line
		}
	}
	require.NoError(t, sc.Err())
	require.Nil(t, cur, "%s: a block is not closed", path)
	return blocks
}

// makeRun starts `make run` in the checkout as a developer would, on its
// own data directory and a free port, and stops it when the test ends.
func makeRun(t *testing.T, root, dataDir string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	cmd := exec.Command("make", "--no-print-directory", "run")
	cmd.Dir = root
	cmd.Env = []string{"GATEWAY_ADDR=" + addr, "DATA_DIR=" + dataDir}
	for _, kv := range os.Environ() {
		// The developer's environment, but not a database or settings of
		// theirs: make run is SQLite and the defaults.
		if name, _, _ := strings.Cut(kv, "="); !strings.HasPrefix(name, "GATEWAY_") && name != "DATABASE_URL" &&
			name != "DATA_DIR" && !strings.HasPrefix(name, "ADMIN_API_KEY") && !strings.HasPrefix(name, "JWT_SECRET") && !strings.HasPrefix(name, "MASTER_KEY") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out := &apptest.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // make, go run and the gateway: one group to stop
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if t.Failed() {
			t.Logf("make run printed:\n%s", out.String())
		}
	})
	// The first run compiles the gateway.
	deadline := time.Now().Add(4 * time.Minute)
	for {
		select {
		case <-done:
			t.Fatalf("make run exited:\n%s", out.String())
		default:
		}
		if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("make run did not become healthy:\n%s", out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	require.Contains(t, out.String(), "Admin API key (development): ", "make run prints the admin key")
	return addr
}

// gatewayLine is the walkthrough's one mention of the gateway's address:
// every command reaches it through $GATEWAY.
const gatewayLine = "GATEWAY=http://localhost:8080"

// TestREADMERunsAsPasted runs every sh block of README.md, in order, in
// one bash, against a fresh `make run` on a port that is not 8080 (only
// the line that sets $GATEWAY becomes the test's address, so a command
// that names localhost:8080 itself fails), with its output going to a
// file as `>log 2>&1` would send it, and checks what the walkthrough
// promises.
func TestREADMERunsAsPasted(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"bash", "curl", "jq", "make"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is missing: .ci/run installs it", tool)
			}
			t.Skipf("%s is not installed", tool)
		}
	}
	root := repoRoot(t)
	blocks := fencedBlocks(t, filepath.Join(root, "README.md"), "sh")
	require.GreaterOrEqual(t, len(blocks), 8, "the walkthrough's blocks")

	work := t.TempDir() // the reader's directory: data/ is where make run keeps its secrets
	addr := makeRun(t, root, filepath.Join(work, "data"))

	var script strings.Builder
	script.WriteString("set -euo pipefail\n")
	set := 0
	for _, b := range blocks {
		fmt.Fprintf(&script, "echo '>>> README.md:%d' >&2\n", b.Line)
		lines := strings.SplitAfter(b.Code, "\n")
		for i, line := range lines {
			if strings.TrimSpace(line) == gatewayLine {
				lines[i] = "GATEWAY=http://" + addr + "\n"
				set++
			}
		}
		script.WriteString(strings.Join(lines, ""))
	}
	require.Equal(t, 1, set, "one line of the walkthrough sets %s", gatewayLine)
	require.NotContains(t, script.String(), ":8080", "a command names the gateway's address instead of $GATEWAY")

	// The reader's `bash >log 2>&1`: a command that opened /dev/stderr by
	// its path (curl -D /dev/stderr) would truncate the log.
	log, err := os.Create(filepath.Join(work, "walkthrough.log"))
	require.NoError(t, err)
	defer log.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir = work
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + work, "LANG=C.UTF-8"}
	cmd.Stdout, cmd.Stderr = log, log
	err = cmd.Run()
	out, rerr := os.ReadFile(log.Name())
	require.NoError(t, rerr)
	require.NoError(t, err, "the README's shell blocks, as pasted, failed:\n%s", out)
	t.Logf("the walkthrough printed:\n%s", out)

	text := string(out)
	rest := text
	for _, b := range blocks {
		marker := fmt.Sprintf(">>> README.md:%d\n", b.Line)
		i := strings.Index(rest, marker)
		require.GreaterOrEqual(t, i, 0, "the log lost %q (was it truncated?):\n%s", marker, text)
		rest = rest[i+len(marker):]
	}
	require.NotContains(t, text, "\x00", "the log was truncated and written past its end")
	for _, want := range []string{
		"HTTP/1.1 201 Created",      // step 3
		"Idempotent-Replayed: true", // the replay
		"idempotency_key_mismatch",  // the same key, another body
		"HTTP/1.1 202 Accepted",     // step 4
		`"status": "succeeded"`,     // step 5
		`"tenant_suspended"`,        // the admin's day
		`"invalid_token"`,           // a token of the rotated credential
		`"Ada Stores"`,              // the new one works
	} {
		require.Contains(t, text, want)
	}
	require.NotContains(t, text, "jq: error", "a need failed")
}

// TestClientREADMEExampleRuns builds payments/client's README example as a
// program of its own and runs it against a real gateway.
func TestClientREADMEExampleRuns(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	blocks := fencedBlocks(t, filepath.Join(root, "payments", "client", "README.md"), "go")
	require.Len(t, blocks, 1, "the example program")

	dir := program(t, root, blocks[0].Code)
	g := apptest.Start(t)
	m := g.Onboard(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "run", "-mod=mod", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "ONCEPAY_URL="+g.URL, "ONCEPAY_CLIENT_ID="+m.ClientID, "ONCEPAY_CLIENT_SECRET="+m.ClientSecret)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the example failed:\n%s", out)
	require.Contains(t, string(out), "paid: pay_")
	require.Contains(t, string(out), " 5000 NGN succeeded", "the listing")
}

// program writes code as a module of its own beside the gateway's
// checkout (its go.sum, a replace to it) and returns the directory.
func program(t *testing.T, root, code string) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(code), 0o644))
	gomod := "module readmeexample\n\ngo 1.26.0\n\nrequire github.com/oncepay/gateway v0.0.0\n\nreplace github.com/oncepay/gateway => " + root + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644))
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))
	return dir
}

// TestREADMEReceiverRuns runs the README's webhook receiver (on a free
// port instead of 9000) against a real gateway: a signed delivery is
// logged, a forged one is refused.
func TestREADMEReceiverRuns(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	blocks := fencedBlocks(t, filepath.Join(root, "README.md"), "go")
	require.Len(t, blocks, 1, "the receiver")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	require.Contains(t, blocks[0].Code, `"localhost:9000"`)
	dir := program(t, root, strings.Replace(blocks[0].Code, `"localhost:9000"`, `"`+addr+`"`, 1))

	g := apptest.Start(t)
	m := g.Onboard(nil)
	r := g.Do("POST", "/v1/webhook_endpoints", []byte(`{"url":"http://`+addr+`/hooks"}`),
		"Authorization", "Bearer "+m.Token, "Idempotency-Key", "hooks-1")
	require.Equal(t, http.StatusCreated, r.StatusCode, string(r.Body))
	secret := r.JSON(t)["secret"].(string)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "run", "-mod=mod", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "WEBHOOK_SECRET="+secret)
	out := &apptest.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // go run and the program: one group to stop
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	deadline := time.Now().Add(2 * time.Minute) // the first run compiles it
	for {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		require.False(t, time.Now().After(deadline), "the receiver did not listen:\n%s", out.String())
		time.Sleep(100 * time.Millisecond)
	}

	forged, err := http.Post("http://"+addr+"/hooks", "application/json", strings.NewReader(`{"type":"payment.succeeded"}`))
	require.NoError(t, err)
	forged.Body.Close()
	require.Equal(t, http.StatusBadRequest, forged.StatusCode, "an unsigned delivery is refused")

	paid := g.Pay(m, "order-1", map[string]any{"amount": 5000, "currency": "NGN", "email": "ada@example.com", "payment_method": "sim_success"})
	require.Equal(t, http.StatusCreated, paid.StatusCode, string(paid.Body))
	id := paid.JSON(t)["id"].(string)
	deadline = time.Now().Add(time.Minute)
	for !strings.Contains(out.String(), "payment.succeeded") {
		require.False(t, time.Now().After(deadline), "the receiver logged no event:\n%s", out.String())
		time.Sleep(100 * time.Millisecond)
	}
	require.Contains(t, out.String(), id)
}
