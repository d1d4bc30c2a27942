package idempotency

import (
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"
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
// that show a secret (sealed) are never kept. The fingerprint is kept
// beside the answer, so another request under the key is still 422.
type Replays struct {
	lru *expirable.LRU[replayKey, replay]
	// keep is how much life a key must have left before its purge for its
	// answer to be kept: TTL and a margin for clocks and the purge's run.
	keep time.Duration
}

type replayKey struct{ merchantID, key string }

type replay struct {
	requestHash string
	response    Response
}

// purgeMargin is kept between an answer leaving memory and its key's
// earliest purge: far more than instances' clocks disagree by.
const purgeMargin = 10 * time.Minute

// NewReplays keeps up to size answers, each for at most ttl; keyTTL is
// KEY_TTL, after which the purge deletes a done key. Nil when size or ttl
// is zero, or keyTTL too short to keep anything safely: no cache.
func NewReplays(size int, ttl, keyTTL time.Duration) *Replays {
	keep := ttl + purgeMargin
	if size <= 0 || ttl <= 0 || keyTTL <= keep {
		return nil
	}
	return &Replays{lru: expirable.NewLRU[replayKey, replay](size, nil, ttl), keep: keyTTL - keep}
}

// get returns the kept answer of a merchant's key.
func (r *Replays) get(merchantID, key string) (replay, bool) {
	if r == nil {
		return replay{}, false
	}
	return r.lru.Get(replayKey{merchantID, key})
}

// add keeps rec's answer when rec is done, its answer not sealed, and its
// completion recent enough (rec.DoneAge, by the database's clock) that the
// purge cannot delete it while it is kept. rec must own its bytes.
func (r *Replays) add(rec *Record) {
	if r == nil || rec.Status != StatusDone || rec.Sealed || rec.DoneAge == nil ||
		time.Duration(*rec.DoneAge*float64(time.Second)) >= r.keep {
		return
	}
	r.lru.Add(replayKey{rec.MerchantID, rec.Key}, replay{requestHash: rec.RequestHash, response: rec.Response()})
}

// Len is how many answers are kept.
func (r *Replays) Len() int {
	if r == nil {
		return 0
	}
	return r.lru.Len()
}
