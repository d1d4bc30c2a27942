package rig

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// Only names the rig made are ever considered for dropping.
func TestCreatedAtReadsOnlyRigNames(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		ok   bool
		unix int64
	}{
		{"oncepay_bench_1796302838_e1443fa5", true, 1796302838},
		{"oncepay_bench_e1443fa5", false, 0},             // the naming before timestamps
		{"oncepay_bench_1796302838_e1443fa5x", false, 0}, // not ours
		{"oncepay_bench_1796302838_zzzzzzzz", false, 0},
		{"oncepay_bench_-5_e1443fa5", false, 0},
		{"oncepay_benchmarks_1796302838_e1443fa5", false, 0},
		{"oncepay_chaos_1796302838_e1443fa5", false, 0}, // another prefix
		{"test", false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			at, ok := createdAt(tc.name, "oncepay_bench")
			require.Equal(t, tc.ok, ok)
			if ok {
				require.Equal(t, time.Unix(tc.unix, 0), at)
			}
		})
	}
}

// A killed run's database is dropped by the next run; a recent one (maybe
// another run's, still going) and one the rig did not name are kept.
func TestCreateDatabaseDropsStaleOnes(t *testing.T) {
	t.Parallel()
	admin := os.Getenv("TEST_DATABASE_URL")
	if admin == "" {
		admin = DefaultDatabaseURL
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, admin)
	require.NoError(t, err)
	// A cleanup, not a defer: it must outlive the drops registered below
	// (cleanups run last-first, after the test function has returned).
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	prefix := fmt.Sprintf("oncepay_rigtest%d", time.Now().UnixNano()%1_000_000)
	old := fmt.Sprintf("%s_%d_0badc0de", prefix, time.Now().Add(-2*staleAfter).Unix())
	recent := fmt.Sprintf("%s_%d_0badc0de", prefix, time.Now().Add(-staleAfter/2).Unix())
	foreign := prefix + "_mine"
	for _, n := range []string{old, recent, foreign} {
		_, err := conn.Exec(ctx, "CREATE DATABASE "+n)
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+n) })
	}

	db, err := CreateDatabase(ctx, admin, prefix)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Drop(context.Background()) })

	rows, err := conn.Query(ctx, "SELECT datname FROM pg_database WHERE datname LIKE $1 ORDER BY 1", prefix+"%")
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.ElementsMatch(t, []string{recent, foreign, db.Name}, names)
}

// An interrupted run (SIGINT) stops the children it started and drops the
// databases it created before it exits with 130. The run is this test
// binary again, in a child process, interrupting itself.
func TestInterruptUndoesTheRun(t *testing.T) {
	admin := os.Getenv("TEST_DATABASE_URL")
	if admin == "" {
		admin = DefaultDatabaseURL
	}
	if prefix := os.Getenv("RIG_TEST_INTERRUPTED_RUN"); prefix != "" {
		CatchInterrupts()
		db, err := CreateDatabase(context.Background(), admin, prefix)
		require.NoError(t, err)
		p := &Process{Bin: "sleep", Args: []string{"60"}, Log: io.Discard}
		require.NoError(t, p.Start())
		fmt.Printf("child %d database %s\n", p.Pid(), db.Name)
		require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGINT))
		time.Sleep(2 * time.Minute) // CatchInterrupts exits first, its drop given a minute
		return
	}
	t.Parallel()
	prefix := fmt.Sprintf("oncepay_rigint%d", time.Now().UnixNano()%1_000_000)
	conn, err := pgx.Connect(context.Background(), admin)
	require.NoError(t, err)
	t.Cleanup(func() {
		// Whatever the run left, should it fail to undo it.
		names, _ := conn.Query(context.Background(), "SELECT datname FROM pg_database WHERE datname LIKE $1", prefix+"%")
		left, _ := pgx.CollectRows(names, pgx.RowTo[string])
		for _, n := range left {
			_, _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+n+" WITH (FORCE)")
		}
		_ = conn.Close(context.Background())
	})
	cmd := exec.Command(os.Args[0], "-test.run=^TestInterruptUndoesTheRun$")
	cmd.Env = append(os.Environ(), "RIG_TEST_INTERRUPTED_RUN="+prefix)
	out, err := cmd.Output()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", out)
	require.Equal(t, 130, exit.ExitCode(), "%s", out)
	var pid int
	var name string
	_, err = fmt.Sscanf(string(out), "child %d database %s", &pid, &name)
	require.NoError(t, err, "%s", out)
	require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "the child is gone")
	var n int
	require.NoError(t, conn.QueryRow(context.Background(), "SELECT count(*) FROM pg_database WHERE datname LIKE $1", prefix+"%").Scan(&n))
	require.Zero(t, n, "the run's database is dropped")
}

func registered() int {
	undo.Lock()
	defer undo.Unlock()
	return len(undo.fns)
}

// The undoing runs newest first, and once it has begun nothing new may
// start. Not parallel: it interrupts the package's registry (and puts it
// back).
func TestUndoNewestFirstAndNothingAfter(t *testing.T) {
	t.Cleanup(func() {
		undo.Lock()
		defer undo.Unlock()
		undo.interrupted = false
	})
	var order []int
	for i := range 3 {
		_, err := register(func() error { return nil }, func() { order = append(order, i) })
		require.NoError(t, err)
	}
	undoAll()
	require.Equal(t, []int{2, 1, 0}, order)
	_, err := register(func() error {
		t.Error("started after the interrupt")
		return nil
	}, func() {})
	require.ErrorIs(t, err, errInterrupted)
	require.ErrorIs(t, (&Process{Bin: "sleep", Args: []string{"60"}, Log: io.Discard}).Start(), errInterrupted)
}

// A process killed and started again, as the chaos run does, is
// registered once, for its current run, and not at all once it exited.
func TestRestartsKeepOneRegistration(t *testing.T) {
	before := registered()
	p := &Process{Bin: "sleep", Args: []string{"60"}, Log: io.Discard}
	for range 5 {
		require.NoError(t, p.Start())
		require.Equal(t, before+1, registered())
		p.Kill()
	}
	require.Equal(t, before, registered())
}

// A command the rig runs to its end (the ceiling's `gateway migrate`)
// sees PATH, HOME and what it is given, never the rest of the rig's
// environment: a stray PROVIDER_TIMEOUT in the shell would otherwise fail
// the gateway's configuration for the bench alone.
func TestRunPassesOnlyItsEnvironment(t *testing.T) {
	t.Setenv("PROVIDER_TIMEOUT", "40s")
	t.Setenv("RIG_GOGC", "123")
	out, err := Run("/bin/sh", []string{"-c", `echo "[$DATABASE_URL][$PROVIDER_TIMEOUT][$GOGC]"`},
		map[string]string{"DATABASE_URL": "postgres://x"}, 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, "[postgres://x][][123]\n", string(out))

	out, err = Run("/bin/sh", []string{"-c", "echo refused >&2; exit 3"}, nil, 10*time.Second)
	require.Error(t, err)
	require.Equal(t, "refused\n", string(out))
}

// Run gives up at its timeout instead of hanging the bench.
func TestRunStopsAtItsTimeout(t *testing.T) {
	t.Parallel()
	start := time.Now()
	_, err := Run("/bin/sh", []string{"-c", "exec sleep 30"}, nil, 200*time.Millisecond)
	require.Error(t, err)
	require.Less(t, time.Since(start), 20*time.Second)
}
