package idempotency

// AddReplay is Replays.add, for the tests.
func AddReplay(r *Replays, rec *Record) { r.add(rec) }

// GetReplay is Replays.get, for the tests.
func GetReplay(r *Replays, merchantID, key string) (Response, bool) {
	v, ok := r.get(merchantID, key)
	return v.response, ok
}
