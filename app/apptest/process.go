package apptest

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildMu  sync.Mutex
	binaries = map[string]string{}
)

// Binary builds the gateway binary once per test process (per tag set) and
// returns its path. Crash tests use -tags failpoint, which compiles in the
// ONCEPAY_FAILPOINT hooks.
func Binary(t testing.TB, tags ...string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	key := strings.Join(tags, ",")
	if p, ok := binaries[key]; ok {
		return p
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatalf("apptest: %v", err)
	}
	dir, err := os.MkdirTemp("", "oncepay-bin-")
	if err != nil {
		t.Fatalf("apptest: %v", err)
	}
	out := filepath.Join(dir, "gateway")
	args := []string{"build", "-o", out}
	if key != "" {
		args = append(args, "-tags", key)
	}
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("apptest: go build: %v\n%s", err, b)
	}
	binaries[key] = out
	return out
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside the module")
	}
	return filepath.Dir(mod), nil
}

// Process is the real gateway binary running as a subprocess.
type Process struct {
	*Gateway
	Bin  string
	Env  map[string]string
	Addr string
	cmd  *exec.Cmd
	out  *SyncBuffer
	done chan struct{}
}

// StartProcess runs bin with env (BaseEnv plus changes) on a free loopback
// port and waits until /healthz answers. The process is killed when the
// test ends.
func StartProcess(t testing.TB, bin string, env map[string]string) *Process {
	t.Helper()
	addr := env["GATEWAY_ADDR"]
	if addr == "" {
		addr = freeAddr(t)
	}
	p := &Process{Bin: bin, Env: env, Addr: addr}
	p.Gateway = &Gateway{T: t, URL: "http://" + addr, DBURL: env["DATABASE_URL"],
		Client: NewClient()}
	p.start()
	t.Cleanup(p.Kill)
	return p
}

func (p *Process) start() {
	t := p.T
	t.Helper()
	cmd := exec.Command(p.Bin, "serve")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for k, v := range p.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, "GATEWAY_ADDR="+p.Addr)
	p.out = &SyncBuffer{}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("apptest: start gateway: %v", err)
	}
	p.cmd = cmd
	p.done = make(chan struct{})
	go func() { _ = cmd.Wait(); close(p.done) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-p.done:
			t.Fatalf("apptest: gateway exited at start:\n%s", p.out.String())
		default:
		}
		resp, err := http.Get(p.URL + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("apptest: gateway did not become healthy:\n%s", p.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Output is what the process printed so far.
func (p *Process) Output() string { return p.out.String() }

// Exited is closed when the process has ended.
func (p *Process) Exited() <-chan struct{} { return p.done }

// Kill ends the process with SIGKILL (a power cut) and waits for it.
func (p *Process) Kill() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Signal sends sig to the process.
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Stop asks the process to shut down gracefully (SIGTERM) and waits.
func (p *Process) Stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.done
}

// Restart starts the binary again with the same environment and address,
// plus changes.
func (p *Process) Restart(changes map[string]string) {
	p.T.Helper()
	p.Kill()
	for k, v := range changes {
		p.Env[k] = v
	}
	p.start()
}

func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("apptest: %v", err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
