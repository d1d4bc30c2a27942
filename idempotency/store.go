package idempotency

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/oncepay/gateway/app/database/dbclock"
	"github.com/oncepay/gateway/app/database/pipeline"
	"github.com/oncepay/gateway/app/database/rawsql"
	"github.com/oncepay/gateway/app/secretbox"
)

// Sentinel errors of the package. Callers compare with errors.Is.
var (
	// ErrNotFound means no key with that merchant and name exists.
	ErrNotFound = errors.New("idempotency: key not found")
	// ErrLostClaim means the claim no longer owns its key: its lease
	// lapsed and another request (or the sweeper) took the key over, or
	// the key was already completed or released. A caller inside a
	// transaction must roll it back.
	ErrLostClaim = errors.New("idempotency: claim lost")
	// ErrBusy means another request holds a fresh, not yet committed
	// claim on the key: it is in use.
	ErrBusy = errors.New("idempotency: key busy")
	// ErrKeyInvalid means an Idempotency-Key value is empty, too long,
	// not printable ASCII, or a malformed quoted string.
	ErrKeyInvalid = errors.New("idempotency: key invalid")
	// ErrUnreadable means a key's stored answer is sealed and does not
	// open: the store has no box, or MASTER_KEY is not the one that
	// sealed it. No retry changes that.
	ErrUnreadable = errors.New("idempotency: the stored answer does not open")
)

// Status is the state of a stored key.
type Status string

// The two states a row can be in. A released key has no row.
const (
	StatusInProgress Status = "in_progress"
	StatusDone       Status = "done"
)

// Record is one row of idempotency_keys.
//
// Every time in it was written by the database's clock (package dbclock),
// and every comparison of those times runs in SQL against the same clock:
// instances whose own clocks disagree still agree on who owns a key.
type Record struct {
	MerchantID  string `gorm:"column:merchant_id;primaryKey"`
	Key         string `gorm:"column:key;primaryKey"`
	RequestHash string `gorm:"column:request_hash"`
	Status      Status `gorm:"column:status"`
	// StatusCode, Header and Body are the final answer, set by Complete.
	StatusCode int               `gorm:"column:status_code"`
	Body       []byte            `gorm:"column:response"`
	Header     map[string]string `gorm:"column:response_headers;serializer:json"`
	// LockedUntil is the end of the owner's lease; LockToken fences the
	// owner, so a request whose key was taken over cannot write.
	LockedUntil time.Time `gorm:"column:locked_until"`
	LockToken   string    `gorm:"column:lock_token"`
	ResourceID  string    `gorm:"column:resource_id"`
	CreatedAt   time.Time `gorm:"column:created_at"`
	// AttemptedAt is when a request last sent the work out (the claim, or
	// a retry that took the key over); settlers that only look up do not
	// move it. The sweeper waits SWEEP_STALE_AFTER after it.
	AttemptedAt *time.Time `gorm:"column:attempted_at"`
	// LookedUpAt is the last lookup of a poll (TakeOverParams.Every).
	LookedUpAt  *time.Time `gorm:"column:looked_up_at"`
	CompletedAt *time.Time `gorm:"column:completed_at"`
	// Lapsed is whether the lease had ended when the row was read, by the
	// database's clock (Get computes it; it is not a column).
	Lapsed bool `gorm:"column:lapsed;->"`
	// DoneAge is how many seconds ago the key was completed, by the
	// database's clock, when Get read it (nil while in progress).
	DoneAge *float64 `gorm:"column:done_age;->"`
	// Sealed says Get opened a sealed answer (one that shows a secret).
	Sealed bool `gorm:"-"`
}

// TableName is the table the migrations create.
func (Record) TableName() string { return "idempotency_keys" }

// Response is the stored answer of a done key.
func (r *Record) Response() Response {
	return Response{Status: r.StatusCode, Header: r.Header, Body: r.Body, ResourceID: r.ResourceID}
}

// Response is a final answer as it is stored and replayed: the exact bytes
// and headers sent, never re-encoded.
type Response struct {
	Status int
	// Header holds the response headers to replay, by canonical name; at
	// least Content-Type, and Location when there is one.
	Header map[string]string
	Body   []byte
	// Sealed says the body shows a secret once (a webhook endpoint's
	// signing secret): it is stored encrypted (SealWith), as the secret
	// itself is, and replayed as sent.
	Sealed bool
	// ResourceID, when not empty, links the key to what the request made
	// (e.g. the payment id). It is stored, not sent.
	ResourceID string
}

// Claim is the proof that a request owns a key. Only the holder of a claim
// may Complete, Release, LeaveInProgress or SetResource, and only while no
// one has taken the key over (the Token must still match).
type Claim struct {
	MerchantID string
	Key        string
	Token      string
	// RequestHash is the fingerprint of the request the key belongs to,
	// when the claimer knows it (a request's claim or takeover; not the
	// sweeper's), and LegacyHash the same request's fingerprint as it was
	// computed before canonical bodies, for records stored back then.
	RequestHash string
	LegacyHash  string
	// SinceAttempt is how long ago, by the database's clock, a request
	// last sent the work out (attempted_at): zero for a fresh claim, the
	// age of the last attempt for any takeover. A retry that then sends
	// the work again marks its own attempt (MarkAttempt); a settler, and a
	// retry that only looks the work up, never do.
	SinceAttempt time.Duration
	// LeaseEnds is, by this process's (monotonic) clock, an instant before
	// which the claim's lease certainly has not ended: the lease began, by
	// the database's clock, no earlier than the moment the claiming
	// statement was sent. Work that must not start once the claim may be
	// lost (a provider call) is bounded by it.
	LeaseEnds time.Time
	// ResourceID is what the key is linked to (SetResource, or a completed
	// answer's), as a takeover found it: it tells a settler which kind of
	// resource the key is for (a refund's "re_…").
	ResourceID string
	// TakenOver is true when the key was claimed from an owner whose lease
	// lapsed: earlier work may have happened and must be re-driven with the
	// same references, never started afresh.
	TakenOver bool

	// state lets the middleware see how the handler ended the claim; it is
	// for metrics and logs only, never for a decision.
	state *claimState
	// held is the pending INSERT of a claim made with Hold, until it is
	// persisted or released.
	held *heldTx
}

// ClaimParams are the arguments of Store.Claim.
type ClaimParams struct {
	MerchantID  string
	Key         string
	RequestHash string
	Lease       time.Duration
	// Hold defers the claim's INSERT until the owner calls Persist or
	// PersistWith (writing its own first rows in the same commit) or
	// Release (nothing was ever written). See heldTx.
	Hold bool
}

// StaleParams are the arguments of Store.Stale.
type StaleParams struct {
	// StaleAfter selects keys whose last attempt is at least this old.
	StaleAfter time.Duration
	// LapsedBefore selects keys whose lease ended before this instant, a
	// time read from the database (dbclock.Read) at the start of a sweep,
	// so a key the sweep itself leaves pending is not picked twice.
	LapsedBefore time.Time
	// Limit caps the number of keys returned; zero or less means 100.
	Limit int
	// MerchantID restricts Stale to one merchant's keys, so every
	// statement (and its row locks) touches one shard of a table sharded
	// by merchant; the sweeper always sets it, from StaleMerchants. Empty
	// means across merchants, which only a single PostgreSQL can run
	// with SKIP LOCKED (Citus refuses it across shards).
	MerchantID string
}

// Store keeps idempotency keys in the database. Every method on a key
// filters on merchant_id: keys are scoped per merchant. Methods that take a
// tx *gorm.DB run on it (it may be a transaction); a nil tx means the
// store's own pool. The store has no clock of its own: see Record.
type Store struct {
	db  *gorm.DB
	box *secretbox.Box // seals answers that show a secret (Response.Sealed)
}

// SealWith has the store encrypt, at rest, the answers that show a secret
// (Response.Sealed) with box, and open them on replay. Without it such an
// answer is refused, not stored in the clear.
func (s *Store) SealWith(box *secretbox.Box) *Store {
	s.box = box
	return s
}

// NewStore returns a store over db.
func NewStore(db *gorm.DB) *Store {
	return &Store{db: db}
}

func (s *Store) exec(ctx context.Context, tx *gorm.DB) *gorm.DB {
	if tx == nil {
		tx = s.db
	}
	return tx.WithContext(ctx)
}

// insertClaim is the claim's INSERT, written out: it runs once per new
// request, and GORM's Create spends more CPU reflecting over Record and
// building the statement than pgx spends sending it. Columns left out
// take the table's defaults (status_code 0, resource_id empty, the rest NULL).
const insertClaim = `INSERT INTO idempotency_keys (merchant_id, key, request_hash, status, locked_until, lock_token, created_at, attempted_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`

// claimAttempts bounds Claim's retries when the row it lost to vanishes
// (released) before it can be read.
const claimAttempts = 3

// Claim tries to own a key with a single INSERT … ON CONFLICT DO NOTHING:
// the insert that affects a row owns the key, so two requests can never
// both win. On success it returns the Claim and a nil Record; otherwise a
// zero Claim and the existing Record, which the caller inspects (replay,
// conflict, mismatch, or TakeOver when its lease lapsed). With p.Hold on
// PostgreSQL the INSERT is not sent yet: the claim is pending until the
// owner's Persist or PersistWith sends it (see heldTx), and a lost race
// shows there, as ErrLostClaim.
func (s *Store) Claim(ctx context.Context, p ClaimParams) (Claim, *Record, error) {
	if p.Hold && s.db.Dialector.Name() == "postgres" {
		return s.heldClaim(p), nil, nil
	}
	for range claimAttempts {
		token := uuid.NewString()
		sent := time.Now()
		db := s.exec(ctx, nil)
		now := dbclock.Now(db)
		res := db.Exec(insertClaim, p.MerchantID, p.Key, p.RequestHash, StatusInProgress, dbclock.Plus(db, p.Lease), token, now, now)
		if lockTimedOut(res.Error) {
			return Claim{}, nil, ErrBusy
		}
		if res.Error != nil {
			return Claim{}, nil, fmt.Errorf("idempotency: claim: %w", res.Error)
		}
		if res.RowsAffected == 1 {
			return s.newClaim(p.MerchantID, p.Key, token, p.RequestHash, 0, sent.Add(p.Lease), false), nil, nil
		}
		existing, err := s.Get(ctx, p.MerchantID, p.Key)
		if errors.Is(err, ErrNotFound) {
			continue // released between our insert and read: try again
		}
		if err != nil {
			return Claim{}, nil, err
		}
		return Claim{}, existing, nil
	}
	return Claim{}, nil, fmt.Errorf("idempotency: claim: key %q keeps being released", p.Key)
}

func (s *Store) newClaim(merchantID, key, token, hash string, since time.Duration, leaseEnds time.Time, takenOver bool) Claim {
	return Claim{MerchantID: merchantID, Key: key, Token: token, RequestHash: hash, SinceAttempt: since,
		LeaseEnds: leaseEnds, TakenOver: takenOver, state: &claimState{}}
}

// TakeOverParams are the arguments of Store.TakeOver.
type TakeOverParams struct {
	MerchantID string
	Key        string
	Lease      time.Duration
	// RequestHash, when set, makes this the retry of the request with that
	// fingerprint: it wins only if the key still belongs to that request
	// (it may have been released and claimed by another body meanwhile).
	// Taking over is not yet an attempt: the new owner calls
	// MarkAttempt when it actually sends the work out again, so one that
	// only looks up leaves the last attempt's age (Claim.SinceAttempt) as
	// it was.
	RequestHash string
	// Every, when positive, rate-limits lookups by pollers: the key is
	// taken only if no TakeOver with Every took it within that long, and
	// the time is recorded (looked_up_at).
	Every time.Duration
}

// TakeOver claims a key whose owner's lease lapsed while it was still in
// progress, with one conditional UPDATE that installs a new lock token: of
// any number of concurrent callers exactly one gets ok == true. The old
// owner's token stops working (ErrLostClaim). ok is false, with no error,
// when the key is missing, done, still leased, belongs to another request
// (p.RequestHash) or was looked up too recently (p.Every). The lease and
// every test of time use the database's clock.
func (s *Store) TakeOver(ctx context.Context, p TakeOverParams) (Claim, bool, error) {
	db := s.exec(ctx, nil)
	now := dbclock.Now(db)
	token := uuid.NewString()
	set := []string{"lock_token = ?", "locked_until = ?"}
	setVars := []any{token, dbclock.Plus(db, p.Lease)}
	where := "merchant_id = ? AND key = ? AND status = ? AND locked_until < ?"
	whereVars := []any{p.MerchantID, p.Key, StatusInProgress, now}
	if p.RequestHash != "" {
		where += " AND request_hash = ?"
		whereVars = append(whereVars, p.RequestHash)
	}
	if p.Every > 0 {
		set = append(set, "looked_up_at = ?")
		setVars = append(setVars, now)
		where += " AND (looked_up_at IS NULL OR looked_up_at < ?)"
		whereVars = append(whereVars, dbclock.Minus(db, p.Every))
	}
	stmt := "UPDATE idempotency_keys SET " + strings.Join(set, ", ") + " WHERE " + where +
		" RETURNING COALESCE(?, 0), resource_id"
	vars := append(append(setVars, whereVars...), dbclock.SecondsSince(db, "attempted_at"))
	sent := time.Now()
	rows, err := db.Raw(stmt, vars...).Rows()
	if err != nil {
		return Claim{}, false, fmt.Errorf("idempotency: take over: %w", err)
	}
	var since float64
	var resource string
	switch err := scanOne(rows, &since, &resource); {
	case errors.Is(err, sql.ErrNoRows):
		return Claim{}, false, nil
	case err != nil:
		return Claim{}, false, fmt.Errorf("idempotency: take over: %w", err)
	}
	if since < 0 {
		since = 0
	}
	c := s.newClaim(p.MerchantID, p.Key, token, p.RequestHash, time.Duration(since*float64(time.Second)), sent.Add(p.Lease), true)
	c.ResourceID = resource
	return c, true, nil
}

// owned updates the key of c with values if c still owns it. A claim still
// held is sent first: with the update, in one transaction, when the caller
// gave none; on its own when the caller runs its own transaction.
func (s *Store) owned(ctx context.Context, tx *gorm.DB, c Claim, op string, values map[string]any) error {
	update := func(tx *gorm.DB) error {
		res := s.exec(ctx, tx).Model(&Record{}).
			Where("merchant_id = ? AND key = ? AND status = ? AND lock_token = ?", c.MerchantID, c.Key, StatusInProgress, c.Token).
			Updates(values)
		return checkOwned(res, op)
	}
	if c.Held() {
		if tx == nil {
			return s.Persist(ctx, c, update)
		}
		if err := s.Persist(ctx, c, nil); err != nil {
			return err
		}
	}
	return update(tx)
}

func checkOwned(res *gorm.DB, op string) error {
	if res.Error != nil {
		return fmt.Errorf("idempotency: %s: %w", op, res.Error)
	}
	if res.RowsAffected != 1 {
		return fmt.Errorf("idempotency: %s: %w", op, ErrLostClaim)
	}
	return nil
}

// Complete stores r as the key's final answer and marks it done. Run it on
// the transaction that records the resource's final state, so the replay
// and the ledger commit (or roll back) together. ErrLostClaim means the key
// was taken over: roll the transaction back, the new owner answers.
func (s *Store) Complete(ctx context.Context, tx *gorm.DB, c Claim, r Response) error {
	header, body, err := s.encodeAnswer(c.MerchantID, c.Key, r)
	if err != nil {
		return err
	}
	values := map[string]any{
		"status":           StatusDone,
		"status_code":      r.Status,
		"response":         body,
		"response_headers": header,
		"completed_at":     dbclock.Now(s.db),
	}
	if r.ResourceID != "" {
		values["resource_id"] = r.ResourceID
	}
	if err := s.owned(ctx, tx, c, "complete", values); err != nil {
		return err
	}
	c.state.set(endCompleted)
	return nil
}

// CompleteWith is Complete together with the caller's write of the
// resource's final state, as one statement: one round trip and one commit
// instead of a transaction's four round trips, for the path every
// successful request ends on. PostgreSQL only (data-modifying CTEs); on
// SQLite it returns errors.ErrUnsupported and the caller uses Complete in a
// transaction.
//
// write is an UPDATE (or INSERT … SELECT) that must apply only while the
// claim owns its key: it runs as a CTE beside one named claim, which yields
// a row exactly when the key is still in progress under c's token — and
// locks that row, so no takeover can slip in between — and it must include
// `EXISTS (SELECT 1 FROM claim)` in its condition and end in RETURNING 1.
// The key is completed with r only if write affected a row.
//
// The outcomes: ErrLostClaim when the claim no longer owns the key (nothing
// written); applied false, with nothing written, when write matched no row
// (for a payment: someone settled it first — the caller falls back to its
// transaction and answers from the ledger); applied true when both were
// written.
//
// also are more data-modifying statements (an event row) run in the same
// statement, each as a CTE that must itself apply only with write: its
// condition names `resource` (EXISTS (SELECT 1 FROM resource)).
func (s *Store) CompleteWith(ctx context.Context, c Claim, r Response, write clause.Expr, also ...clause.Expr) (applied bool, err error) {
	// Like PersistWith's, one statement on this request's rows alone: it
	// may share a round trip and a commit (app/database/pipeline).
	db := pipeline.Session(s.db, ctx)
	if db.Dialector.Name() != "postgres" {
		return false, errors.ErrUnsupported
	}
	if c.Held() {
		// Never on the request path (the ledger row's Persist sends the
		// claim before the provider is called); a held claim is sent
		// first, so the statement below finds its row.
		if err := s.Persist(ctx, c, nil); err != nil {
			return false, err
		}
	}
	header, body, err := s.encodeAnswer(c.MerchantID, c.Key, r)
	if err != nil {
		return false, err
	}
	// Rows, not Scan: GORM's Scan renders every statement as text with its
	// values inlined (a regexp over the ~600-byte answer) for a logger that
	// is silent — a tenth of a payment's allocations.
	vars := make([]any, 0, 16+len(also))
	vars = append(vars, c.MerchantID, c.Key, StatusInProgress, c.Token, write)
	for _, e := range also {
		vars = append(vars, e)
	}
	vars = append(vars, StatusDone, r.Status, body, header, dbclock.Now(db),
		r.ResourceID, r.ResourceID,
		c.MerchantID, c.Key, StatusInProgress, c.Token)
	rows, err := rawsql.Raw(db, completeSQL(len(also)), vars...).Rows()
	var owned, completed int
	if err == nil {
		err = scanOne(rows, &owned, &completed)
	}
	switch {
	case err != nil:
		return false, fmt.Errorf("idempotency: complete: %w", err)
	case owned != 1:
		return false, fmt.Errorf("idempotency: complete: %w", ErrLostClaim)
	case completed != 1:
		return false, nil
	}
	c.state.set(endCompleted)
	return true, nil
}

// completeSQL is CompleteWith's statement with n more CTEs; the common
// ones are built once (it runs for every new payment).
func completeSQL(n int) string {
	if n < len(completeSQLs) {
		return completeSQLs[n]
	}
	return buildCompleteSQL(n)
}

var completeSQLs = []string{buildCompleteSQL(0), buildCompleteSQL(1), buildCompleteSQL(2), buildCompleteSQL(3)}

func buildCompleteSQL(n int) string {
	extra := ""
	for i := range n {
		extra += fmt.Sprintf(", also%d AS (?)", i)
	}
	return `WITH claim AS (
  SELECT 1 FROM idempotency_keys
  WHERE merchant_id = ? AND key = ? AND status = ? AND lock_token = ?
  FOR UPDATE
), resource AS (?)` + extra + `, done AS (
  UPDATE idempotency_keys
  SET status = ?, status_code = ?, response = ?, response_headers = ?, completed_at = ?,
      resource_id = CASE WHEN ? = '' THEN resource_id ELSE ? END
  WHERE merchant_id = ? AND key = ? AND status = ? AND lock_token = ? AND EXISTS (SELECT 1 FROM resource)
  RETURNING 1
)
SELECT (SELECT count(*) FROM claim) AS owned, (SELECT count(*) FROM done) AS completed`
}

// scanOne reads the one row of rows into dest and closes rows.
func scanOne(rows *sql.Rows, dest ...any) error {
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	return rows.Close()
}

// sealedPrefix starts a sealed body in the response column; a stored
// answer's body (JSON, problem+json) never starts with a NUL.
var sealedPrefix = []byte("\x00sealed:")

// sealAAD binds a sealed answer to its key's row.
func sealAAD(merchantID, key string) []byte { return []byte(merchantID + "\x00" + key) }

// encodeAnswer is r's headers and body as the columns store them: headers
// as JSON text (NULL when there are none), the body never NULL, sealed
// when r.Sealed.
func (s *Store) encodeAnswer(merchantID, key string, r Response) (header any, body []byte, err error) {
	if r.Sealed {
		if s.box == nil {
			return nil, nil, errors.New("idempotency: a sealed answer needs SealWith")
		}
		r.Body = append(slices.Clip(sealedPrefix), s.box.Seal(sealAAD(merchantID, key), r.Body)...)
	}
	if len(r.Header) > 0 {
		b, err := json.Marshal(r.Header)
		if err != nil {
			return nil, nil, fmt.Errorf("idempotency: complete: %w", err)
		}
		header = string(b)
	}
	body = r.Body
	if body == nil {
		body = []byte{}
	}
	return header, body, nil
}

// PutDone stores a final answer for a key that has no row — its claim was
// released (the provider said it never saw the charge) or its answer
// purged — because the ledger learned the outcome later: a retry of
// requestHash then replays r instead of starting afresh. A key that has a
// row is left alone (ok false): its owner, or its stored answer, speaks
// for it. Run it in the transaction that records the outcome.
func (s *Store) PutDone(ctx context.Context, tx *gorm.DB, merchantID, key, requestHash string, r Response) (ok bool, err error) {
	header, body, err := s.encodeAnswer(merchantID, key, r)
	if err != nil {
		return false, err
	}
	db := s.exec(ctx, tx)
	now := dbclock.Now(db)
	res := db.Exec(`INSERT INTO idempotency_keys (merchant_id, key, request_hash, status, status_code, response, response_headers,
  locked_until, lock_token, resource_id, created_at, attempted_at, completed_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, '', ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
		merchantID, key, requestHash, StatusDone, r.Status, body, header, now, r.ResourceID, now, now, now)
	if res.Error != nil {
		return false, fmt.Errorf("idempotency: put done: %w", res.Error)
	}
	return res.RowsAffected == 1, nil
}

// Reinstate puts back, in progress, the key of a request whose outcome
// turned out to be unknown after all (released as never charged, and the
// provider now has the charge pending): its lease lapsed and its attempt
// now, so a retry takes it over at once and the sweeper settles it after
// SWEEP_STALE_AFTER. A key that has a row is left alone (ok false). Run it
// in the transaction that re-opens the resource.
func (s *Store) Reinstate(ctx context.Context, tx *gorm.DB, merchantID, key, requestHash, resourceID string) (ok bool, err error) {
	db := s.exec(ctx, tx)
	now := dbclock.Now(db)
	res := db.Exec(`INSERT INTO idempotency_keys (merchant_id, key, request_hash, status, locked_until, lock_token, resource_id, created_at, attempted_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
		merchantID, key, requestHash, StatusInProgress, now, uuid.NewString(), resourceID, now, now)
	if res.Error != nil {
		return false, fmt.Errorf("idempotency: reinstate: %w", res.Error)
	}
	return res.RowsAffected == 1, nil
}

// Release deletes the claim: nothing happened outside the gateway (the body
// was invalid, or the provider never received the charge), so a later
// request with the key becomes a fresh owner.
func (s *Store) Release(ctx context.Context, c Claim) error { return s.ReleaseTx(ctx, nil, c) }

// ReleaseTx is Release on the caller's transaction (nil: the pool), so a
// ledger change that goes with the release (a payment marked never charged)
// commits only if the claim still owned the key.
func (s *Store) ReleaseTx(ctx context.Context, tx *gorm.DB, c Claim) error {
	if p := c.held.take(); p != nil {
		// Never sent: there is nothing to undo.
		c.held.mu.Lock()
		c.held.dropped = true
		c.held.mu.Unlock()
		c.held.end()
		c.state.set(endReleased)
		return nil
	}
	res := s.exec(ctx, tx).
		Where("merchant_id = ? AND key = ? AND status = ? AND lock_token = ?", c.MerchantID, c.Key, StatusInProgress, c.Token).
		Delete(&Record{})
	if err := checkOwned(res, "release"); err != nil {
		return err
	}
	c.state.set(endReleased)
	return nil
}

// Refuse ends the claim of a request refused before it did anything (a
// body that fails validation, a label that is not JSON) and returns cause
// for the handler to answer. A fresh claim is released, so the client may
// fix the request and reuse the key. A claim taken over from an earlier
// attempt is not: that attempt's work (a payment or refund in flight)
// holds the key, and the same fingerprint passed once, so what refuses it
// now lies outside the fingerprint (a Content-Type label) or in a rule a
// deploy changed. Released, the key would orphan that work — nothing would
// settle it, and a fresh claim would send it again — so it is left in
// progress, for the sweeper or a retry the handler accepts.
func (s *Store) Refuse(ctx context.Context, c Claim, cause error) error {
	end := s.Release
	if c.TakenOver {
		end = s.LeaveInProgress
	}
	if err := end(ctx, c); err != nil && !errors.Is(err, ErrLostClaim) {
		return fmt.Errorf("idempotency: end a refused request's claim: %w (while answering %v)", err, cause)
	}
	return cause
}

// LeaveInProgress ends this request's interest in a key whose outcome is
// unknown (a provider timeout): the key stays in progress but its lease ends
// now, so the client's next retry takes it over and re-drives the work at
// once instead of waiting out the lease. That is safe because the work is
// re-driven with the same provider reference, which the provider dedupes.
func (s *Store) LeaveInProgress(ctx context.Context, c Claim) error {
	return s.LeaveInProgressTx(ctx, nil, c)
}

// LeaveInProgressTx is LeaveInProgress on the caller's transaction (nil:
// the pool).
func (s *Store) LeaveInProgressTx(ctx context.Context, tx *gorm.DB, c Claim) error {
	// A millisecond ago, not now: a lease lapses when locked_until < now,
	// and SQLite's clock has millisecond steps, so "now" would hold the key
	// for a retry arriving within the same millisecond.
	if err := s.owned(ctx, tx, c, "leave in progress", map[string]any{"locked_until": dbclock.Minus(s.db, time.Millisecond)}); err != nil {
		return err
	}
	c.state.set(endLeft)
	return nil
}

// MarkAttempt records that c's owner is sending the work out again now
// (a retry that took the key over re-sends the charge): the sweeper waits
// SWEEP_STALE_AFTER from here before it trusts a provider's "not found".
// Run it on the transaction of the owner's writes before the call (nil:
// the pool); ErrLostClaim when the claim no longer owns the key.
func (s *Store) MarkAttempt(ctx context.Context, tx *gorm.DB, c Claim) error {
	return s.owned(ctx, tx, c, "mark attempt", map[string]any{"attempted_at": dbclock.Now(s.db)})
}

// SetResource links the key to the resource the request is working on (e.g.
// the payment id) before the outcome is known, so a sweeper or a retry that
// takes over can find it.
func (s *Store) SetResource(ctx context.Context, tx *gorm.DB, c Claim, resourceID string) error {
	return s.owned(ctx, tx, c, "set resource", map[string]any{"resource_id": resourceID})
}

// Get reads one key of a merchant, with Lapsed computed by the database.
// It returns ErrNotFound when there is no such key (including another
// merchant's key of the same name).
func (s *Store) Get(ctx context.Context, merchantID, key string) (*Record, error) {
	var rec Record
	db := s.exec(ctx, nil)
	err := db.Select("*, (locked_until < ?) AS lapsed, ? AS done_age", dbclock.Now(db), dbclock.SecondsSince(db, "completed_at")).
		Where("merchant_id = ? AND key = ?", merchantID, key).Take(&rec).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("idempotency: get: %w", err)
	}
	if bytes.HasPrefix(rec.Body, sealedPrefix) {
		if s.box == nil {
			return nil, fmt.Errorf("%w: the store has no box", ErrUnreadable)
		}
		if rec.Body, err = s.box.Open(sealAAD(merchantID, key), rec.Body[len(sealedPrefix):]); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrUnreadable, err)
		}
		rec.Sealed = true
	}
	return &rec, nil
}

// Backlog is the work the keys hold open, for the metrics: how many keys
// have no stored answer yet — requests in flight, outcomes the sweeper is
// settling, payments and refunds in review — and how long ago, by the
// database's clock, the oldest of them was last attempted. Like
// StaleMerchants it is a read across merchants that takes no locks, on
// the partial index of open keys.
func (s *Store) Backlog(ctx context.Context) (open int64, oldest time.Duration, err error) {
	db := s.exec(ctx, nil)
	var row struct {
		Open   int64
		Oldest float64
	}
	err = db.Raw(`SELECT count(*) AS open, COALESCE(max(?), 0) AS oldest FROM idempotency_keys
WHERE completed_at IS NULL`, dbclock.SecondsSince(db, "attempted_at")).Scan(&row).Error
	if err != nil {
		return 0, 0, fmt.Errorf("idempotency: backlog: %w", err)
	}
	return row.Open, time.Duration(row.Oldest * float64(time.Second)), nil
}

// StaleMerchants lists the merchants that have keys Stale would return
// (p.MerchantID and p.Limit aside), the one with the oldest such attempt
// first. It is the sweeper's only statement across merchants: a read that
// takes no locks (on a table sharded by merchant, a multi-shard SELECT);
// the locking is Stale's, one merchant at a time. It reads the partial
// index of open keys.
func (s *Store) StaleMerchants(ctx context.Context, p StaleParams) ([]string, error) {
	db := s.exec(ctx, nil)
	var out []string
	err := db.Raw(`SELECT merchant_id FROM idempotency_keys
WHERE completed_at IS NULL AND status = ? AND attempted_at < ? AND locked_until < ?
GROUP BY merchant_id ORDER BY min(attempted_at), merchant_id`,
		StatusInProgress, dbclock.Minus(db, p.StaleAfter), p.LapsedBefore.UTC()).Scan(&out).Error
	if err != nil {
		return nil, fmt.Errorf("idempotency: stale merchants: %w", err)
	}
	return out, nil
}

// Stale lists, oldest attempt first, keys of p.MerchantID (or of every
// merchant, when empty: see StaleParams) still in progress whose last
// attempt is at least p.StaleAfter old and whose lease ended before
// p.LapsedBefore, both by the database's clock. On PostgreSQL the rows are
// locked FOR UPDATE SKIP LOCKED, so run it in a transaction: concurrent
// sweepers get disjoint sets and keep their rows until they commit. SQLite
// has a single writer and no row locks, so there the clause is left out.
func (s *Store) Stale(ctx context.Context, tx *gorm.DB, p StaleParams) ([]Record, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	q := s.exec(ctx, tx)
	if q.Dialector.Name() == "postgres" {
		q = q.Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate, Options: clause.LockingOptionsSkipLocked})
	}
	var recs []Record
	if p.MerchantID != "" {
		q = q.Where("merchant_id = ?", p.MerchantID)
	}
	// completed_at IS NULL selects the partial index of open keys.
	err := q.Where("completed_at IS NULL AND status = ? AND attempted_at < ? AND locked_until < ?",
		StatusInProgress, dbclock.Minus(q, p.StaleAfter), p.LapsedBefore.UTC()).
		Order("attempted_at, merchant_id, key").
		Limit(limit).
		Find(&recs).Error
	if err != nil {
		return nil, fmt.Errorf("idempotency: stale: %w", err)
	}
	return recs, nil
}

// PurgeDone deletes done keys completed at least ttl ago (by the
// database's clock), merchant by merchant, at most batch rows per statement
// (zero or less means 1000) so no statement holds many locks or a long
// transaction; for each merchant it loops until a statement deletes fewer
// than batch rows. A key in progress is never deleted. The payment keeps
// the request's fingerprint, so the ledger still knows what was asked.
//
// One unlocked read finds the merchants with keys to purge (the keys it
// reads are the ones about to go); every DELETE then names one merchant,
// so on a table sharded by merchant it touches one shard.
func (s *Store) PurgeDone(ctx context.Context, ttl time.Duration, batch int) (deleted int64, err error) {
	if batch <= 0 {
		batch = 1000
	}
	db := s.exec(ctx, nil)
	var merchants []string
	if err := db.Raw("SELECT DISTINCT merchant_id FROM idempotency_keys WHERE status = ? AND completed_at < ?",
		StatusDone, dbclock.Minus(db, ttl)).Scan(&merchants).Error; err != nil {
		return 0, fmt.Errorf("idempotency: purge: %w", err)
	}
	for _, m := range merchants {
		n, err := s.purgeMerchant(ctx, m, ttl, batch)
		deleted += n
		if err != nil {
			return deleted, err
		}
	}
	return deleted, nil
}

// purgeMerchant is PurgeDone for one merchant.
func (s *Store) purgeMerchant(ctx context.Context, merchantID string, ttl time.Duration, batch int) (deleted int64, err error) {
	for {
		if err := ctx.Err(); err != nil {
			return deleted, err
		}
		db := s.exec(ctx, nil)
		victims := db.Model(&Record{}).Select("key").
			Where("merchant_id = ? AND status = ? AND completed_at < ?", merchantID, StatusDone, dbclock.Minus(db, ttl)).
			Order("completed_at").Limit(batch)
		// The status test is repeated outside the subquery so a row can
		// never be deleted unless done.
		res := db.Where("merchant_id = ? AND status = ? AND key IN (?)", merchantID, StatusDone, victims).Delete(&Record{})
		if res.Error != nil {
			return deleted, fmt.Errorf("idempotency: purge: %w", res.Error)
		}
		deleted += res.RowsAffected
		if res.RowsAffected < int64(batch) {
			return deleted, nil
		}
	}
}
