package idempotency

// AddReplay is Replays.add, for the tests.
func AddReplay(r *Replays, rec *Record) { r.add(rec) }
