package rig

import (
	"context"
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
}

// atInterrupt registers f to run if the program is interrupted; done
// unregisters it once the run has undone the thing itself.
func atInterrupt(f func()) (done func()) {
	undo.Lock()
	defer undo.Unlock()
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
	}
}

// undoAll runs what is registered, newest first.
func undoAll() {
	undo.Lock()
	fns := undo.fns
	undo.fns = nil
	last := undo.next
	undo.Unlock()
	for id := last - 1; id >= 0; id-- {
		if f, ok := fns[id]; ok {
			f()
		}
	}
}

// CatchInterrupts makes SIGINT and SIGTERM stop every child the rig
// started and drop every database it created, newest first, and then
// exit with status 130: an interrupted `make bench` or `make chaos`
// leaves no gateway running and no database behind. Call it first in
// main.
func CatchInterrupts() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-c
		fmt.Fprintf(os.Stderr, "rig: %v: stopping the children and dropping the databases of this run\n", s)
		undoAll()
		os.Exit(130)
	}()
}

// dropOnInterrupt is d's undo: its own deadline, as the run's context may
// be the thing that was interrupted.
func dropOnInterrupt(d *Database) func() {
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := d.Drop(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "rig: drop database %s: %v\n", d.Name, err)
		}
	}
}
