package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuUse is the CPU time (user + system) the processes of a measurement
// spent: the server side (the gateway, or nothing for pgbench), PostgreSQL,
// and the client (this program, or pgbench). Rates on this machine drift
// with the host's load; CPU time per request drifts much less, so it is
// what tells where a payment's cost goes and what a change saved.
type cpuUse struct {
	server, postgres, client time.Duration
	ok                       bool // false where /proc is not readable
}

// perRequest divides each part by n requests.
func (c cpuUse) perRequest(n int) (server, postgres, client time.Duration) {
	if n == 0 {
		return 0, 0, 0
	}
	d := time.Duration(n)
	return c.server / d, c.postgres / d, c.client / d
}

// userHZ is the unit of /proc's CPU times: USER_HZ, 100 on every Linux
// ABI Go runs on.
const userHZ = 100

// procCPU reads utime+stime and, with children, cutime+cstime (the times
// of reaped children) of pid from /proc/<pid>/stat.
func procCPU(pid string, children bool) (time.Duration, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return 0, false
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
	if len(f) < 15 {
		return 0, false
	}
	fields := []int{11, 12} // utime, stime (fields 14, 15)
	if children {
		fields = append(fields, 13, 14) // cutime, cstime
	}
	var ticks int64
	for _, k := range fields {
		n, err := strconv.ParseInt(f[k], 10, 64)
		if err != nil {
			return 0, false
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, true
}

// postgresCPU sums the CPU time of every process named postgres on this
// machine, plus what the postmaster reaped from exited backends (pgbench's
// connections end with it, and their time must still count).
func postgresCPU() (time.Duration, bool) {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, false
	}
	var total time.Duration
	found := false
	for _, d := range dirs {
		pid := d.Name()
		if pid[0] < '0' || pid[0] > '9' {
			continue
		}
		comm, err := os.ReadFile(filepath.Join("/proc", pid, "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			continue
		}
		// The postmaster is the postgres process whose parent is not one.
		postmaster := true
		if b, err := os.ReadFile(filepath.Join("/proc", pid, "stat")); err == nil {
			if i := strings.LastIndexByte(string(b), ')'); i >= 0 {
				if f := strings.Fields(string(b)[i+1:]); len(f) > 1 {
					pc, _ := os.ReadFile(filepath.Join("/proc", f[1], "comm"))
					postmaster = strings.TrimSpace(string(pc)) != "postgres"
				}
			}
		}
		if t, ok := procCPU(pid, postmaster); ok {
			total += t
			found = true
		}
	}
	return total, found
}

// selfCPU is this process's own CPU time (the HTTP clients).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuMeter takes the CPU times of the gateway, PostgreSQL and this process
// at the start of a measurement; stop returns what each spent since.
type cpuMeter struct {
	gatewayPid            string
	gateway, pg, self     time.Duration
	okGateway, okPostgres bool
}

func startCPU(gatewayPid int) cpuMeter {
	m := cpuMeter{gatewayPid: strconv.Itoa(gatewayPid)}
	m.gateway, m.okGateway = procCPU(m.gatewayPid, false)
	m.pg, m.okPostgres = postgresCPU()
	m.self = selfCPU()
	return m
}

func (m cpuMeter) stop() cpuUse {
	gw, okG := procCPU(m.gatewayPid, false)
	pg, okP := postgresCPU()
	return cpuUse{
		server: gw - m.gateway, postgres: pg - m.pg, client: selfCPU() - m.self,
		ok: okG && okP && m.okGateway && m.okPostgres,
	}
}
