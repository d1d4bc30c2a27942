package rig

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// What a run started or created, to undo if it is interrupted: the
// terminal's Ctrl-C reaches the children too, but a `kill` of make or of
// the program does not, and no run's deferred cleanup runs on a signal.
var undo struct {
	sync.Mutex
	next int
	fns  map[int]func()
	// interrupted: undoing has begun, and nothing new may start.
	interrupted bool
}

var errInterrupted = errors.New("rig: interrupted")

// register runs start and, if it succeeds, registers f to run if the
// program is interrupted, both under the registry's lock, so nothing
// starts unregistered or after the undoing began. done unregisters f once
// the run has undone the thing itself.
func register(start func() error, f func()) (done func(), err error) {
	undo.Lock()
	defer undo.Unlock()
	if undo.interrupted {
		return nil, errInterrupted
	}
	if err := start(); err != nil {
		return nil, err
	}
	if undo.fns == nil {
		undo.fns = map[int]func(){}
	}
	id := undo.next
	undo.next++
	undo.fns[id] = f
	return func() {
		undo.Lock()
		defer undo.Unlock()
		delete(undo.fns, id)
	}, nil
}

// undoAll stops anything new from starting and runs what is registered,
// newest first.
func undoAll() {
	undo.Lock()
	undo.interrupted = true
	fns, last := undo.fns, undo.next
	undo.fns = nil
	undo.Unlock()
	for id := last - 1; id >= 0; id-- {
		if f, ok := fns[id]; ok {
			f()
		}
	}
}

// CatchInterrupts makes the first SIGINT or SIGTERM stop every child the
// rig started and drop every database it created, newest first, and then
// exit with status 130: an interrupted `make bench` or `make chaos` leaves
// no gateway running and no database behind. A second signal ends the
// program at once. Call it first in main, and end main with Exit.
func CatchInterrupts() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-c
		signal.Stop(c)
		fmt.Fprintf(os.Stderr, "rig: %v: stopping the children and dropping the databases of this run\n", s)
		undoAll()
		os.Exit(130)
	}()
}

// Exit ends the program with code, unless an interrupt is being undone:
// then it waits for the undoing, which exits with 130 (the run's own
// failure is most likely the interrupt's doing).
func Exit(code int) {
	undo.Lock()
	interrupted := undo.interrupted
	undo.Unlock()
	if interrupted {
		select {}
	}
	os.Exit(code)
}

// dropOnInterrupt is d's undo: its own deadline, as the run's context may
// be the thing that was interrupted. A generous one: DROP DATABASE waits
// for a checkpoint, which on a busy machine (a bench run's own load, a CI
// run beside it) took over ten seconds, and a drop given up leaves the
// database behind.
func dropOnInterrupt(d *Database) func() {
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := d.drop(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "rig: drop database %s: %v\n", d.Name, err)
		}
	}
}
