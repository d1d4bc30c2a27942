package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/oncepay/gateway/bench/internal/rig"
)

// instanceHeader is the response header HAProxy adds with the name of the
// instance that answered, so the clients (and the audit) know which one
// did. The gateway itself sends nothing of the kind.
const instanceHeader = "X-Oncepay-Instance"

// instance is one gateway process behind the load balancer.
type instance struct {
	name string // INSTANCE_ID, and HAProxy's server name
	url  string // its own address, for readiness checks
	addr string
	skew string // CLOCK_SKEW, or ""
	proc *rig.Process
	log  *os.File
}

// haproxyBinary is the load balancer to run: -haproxy, else haproxy on
// PATH, else Debian's /usr/sbin/haproxy (root's PATH may lack /usr/sbin).
func haproxyBinary(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if p, err := exec.LookPath("haproxy"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/haproxy"); err == nil {
		return "/usr/sbin/haproxy", nil
	}
	return "", fmt.Errorf("haproxy not found (apt-get install haproxy; .ci/run does)")
}

// haproxyConfig is the load balancer in front of the instances:
// round-robin, each instance health-checked on /readyz every 300 ms (out
// after 2 failures, back after 2 passes), a request whose connection an
// instance refused (it was just killed) redispatched to another one — a
// connection failure means nothing was sent, so that is safe for any
// request — and the answering instance named in instanceHeader.
func haproxyConfig(listen, health string, instances []*instance) string {
	var b strings.Builder
	fmt.Fprintf(&b, `global
    maxconn 4096
defaults
    mode http
    timeout connect 1s
    timeout client 30s
    timeout server 30s
    timeout http-request 10s
    retries 3
    option redispatch 1
frontend gateways
    bind %s
    monitor-uri %s
    default_backend gateways
backend gateways
    balance roundrobin
    option httpchk GET /readyz
    http-check expect status 200
    default-server inter 300ms fall 2 rise 2
    http-response set-header %s %%s
`, listen, health, instanceHeader)
	for _, in := range instances {
		fmt.Fprintf(&b, "    server %s %s check\n", in.name, in.addr)
	}
	return b.String()
}

// startHAProxy writes the configuration into dir and starts HAProxy in the
// foreground (-db), its output appended to log.
func startHAProxy(bin, dir string, instances []*instance, log io.Writer) (*rig.Process, string, error) {
	addr, err := rig.FreeAddr()
	if err != nil {
		return nil, "", err
	}
	const health = "/_lb/health"
	cfg := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(haproxyConfig(addr, health, instances)), 0o600); err != nil {
		return nil, "", err
	}
	p := &rig.Process{Bin: bin, Args: []string{"-db", "-f", cfg}, Log: log, Health: "http://" + addr + health}
	if err := p.Start(); err != nil {
		return nil, "", err
	}
	return p, "http://" + addr, nil
}
