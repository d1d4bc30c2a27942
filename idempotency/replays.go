package idempotency

import (
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// Replays keeps the answers of done keys this instance has read, so that a
// retry of a finished request — the most common retry there is: the app
// lost the answer and sends the request again — is answered from memory,
// without a round trip to the database.
//
// It is safe because a done key's answer never changes: no write touches a
// done key but the purge, which deletes it KEY_TTL after its completion. An
// answer is therefore kept at most TTL, and only when its key is at least
// TTL plus a margin away from its purge (by the database's clock), so no
// instance answers from memory what the database no longer has. Answers
// that show a secret (sealed) are never kept, nor answers larger than
// maxReplayBody, so memory stays under size × maxReplayBody. The
// fingerprint is kept beside the answer, so another request under the key
// is still 422.
type Replays struct {
	lru *lru.Cache[replayKey, replay]
	ttl time.Duration
	// keep is how old (since its completion) a key may be for its answer
	// to be kept: KEY_TTL less TTL and a margin for clocks and the purge's
	// run.
	keep time.Duration
}

type replayKey struct{ merchantID, key string }

type replay struct {
	requestHash string
	response    Response
	expires     time.Time // by this process's monotonic clock
}

// maxReplayBody bounds a kept answer (a payment's is under 1 KiB; one that
// echoes large metadata is left to the database).
const maxReplayBody = 8 << 10

// purgeMargin is kept between an answer leaving memory and its key's
// earliest purge: far more than instances' clocks disagree by.
const purgeMargin = 10 * time.Minute

// NewReplays keeps up to size answers, each for at most ttl; keyTTL is
// KEY_TTL, after which the purge deletes a done key. Nil when size or ttl
// is zero, or keyTTL too short to keep anything safely: no cache (the
// configuration refuses that combination).
func NewReplays(size int, ttl, keyTTL time.Duration) *Replays {
	if !ReplaysFit(size, ttl, keyTTL) {
		return nil
	}
	c, err := lru.New[replayKey, replay](size)
	if err != nil {
		return nil
	}
	return &Replays{lru: c, ttl: ttl, keep: keyTTL - ttl - purgeMargin}
}

// ReplaysFit reports whether answers can be kept size at a time for ttl
// each, clear of a KEY_TTL of keyTTL.
func ReplaysFit(size int, ttl, keyTTL time.Duration) bool {
	return size > 0 && ttl > 0 && keyTTL > ttl+purgeMargin
}

// get returns the kept answer of a merchant's key.
func (r *Replays) get(merchantID, key string) (replay, bool) {
	if r == nil {
		return replay{}, false
	}
	k := replayKey{merchantID, key}
	v, ok := r.lru.Get(k)
	if ok && !time.Now().Before(v.expires) {
		r.lru.Remove(k)
		return replay{}, false
	}
	return v, ok
}

// add keeps rec's answer when rec is done, its answer not sealed nor
// large, and its completion recent enough (rec.DoneAge, by the database's
// clock) that the purge cannot delete it while it is kept. rec must own
// its bytes.
func (r *Replays) add(rec *Record) {
	if r == nil || rec.Status != StatusDone || rec.Sealed || rec.DoneAge == nil || len(rec.Body) > maxReplayBody ||
		time.Duration(*rec.DoneAge*float64(time.Second)) >= r.keep {
		return
	}
	r.lru.Add(replayKey{rec.MerchantID, rec.Key},
		replay{requestHash: rec.RequestHash, response: rec.Response(), expires: time.Now().Add(r.ttl)})
}

// Len is how many answers are kept.
func (r *Replays) Len() int {
	if r == nil {
		return 0
	}
	return r.lru.Len()
}
