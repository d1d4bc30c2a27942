// Package events tells merchants every outcome: one event per state
// transition of a payment or refund, written in the transition's own
// transaction (or its one statement), and delivered to the merchant's
// webhook endpoints as Standard Webhooks — signed, retried, logged — and
// listed by the events API.
//
// # No event lost, none invented
//
// An event row commits with its transition or not at all: a crash can
// neither lose the event of a change that committed nor emit one for a
// change that rolled back. Delivery is a durable queue's job (River):
// an outbox relay hands each new event to the queue — one delivery job per
// subscribed endpoint — in a transaction that also marks the event handed
// over (enqueued_at), so every event is enqueued exactly once, after any
// crash. An event of a merchant with no live endpoint is written handed
// over already (bornHandedOver): an endpoint hears the transitions after
// its creation. The queue retries a failed delivery on WEBHOOK_RETRY_SCHEDULE,
// and each attempt is owned by one instance. Deliveries are at least once:
// the same event keeps its webhook-id on every attempt, so a receiver
// dedupes by it. Ordering is not promised; an event's created_at and the
// object's own state are.
//
// Why a relay and not the job itself in the transition's transaction: the
// common ending of a payment is one SQL statement (the final state, the
// stored answer and now the event, idempotency.Store.CompleteWith), not a
// transaction River could insert into; making it one would cost the hot
// path three more round trips. Measured (BenchmarkTransitionEnqueue, 8
// goroutines on PostgreSQL, medians of 3): the event row in the
// transition's statement 0.22 ms a transition, the event and River's job
// in a transaction around it 0.66 ms — three times the database time per
// transition, where the relay then hands events over in batches (up to
// relayBatch a transaction), and not at all for merchants without an
// endpoint. The event row in that statement is the transactional part;
// the relay's own transaction moves it to the queue.
package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/oncepay/gateway/app/database/dbclock"
	"github.com/oncepay/gateway/app/ids"
)

// Event types.
const (
	PaymentProcessing     = "payment.processing"
	PaymentSucceeded      = "payment.succeeded"
	PaymentFailed         = "payment.failed"
	PaymentRequiresReview = "payment.requires_review"
	RefundSucceeded       = "refund.succeeded"
	RefundFailed          = "refund.failed"
	RefundRequiresReview  = "refund.requires_review"
)

// Types lists every event type.
var Types = []string{PaymentProcessing, PaymentSucceeded, PaymentFailed, PaymentRequiresReview, RefundSucceeded, RefundFailed, RefundRequiresReview}

// Retention is how long events are kept (and listed).
const Retention = 30 * 24 * time.Hour

// Event is one row of the events table. Payload is the exact JSON body
// every delivery of the event sends (and signs).
type Event struct {
	MerchantID string `gorm:"primaryKey"`
	ID         string `gorm:"primaryKey"`
	Type       string
	ObjectID   string
	Dedupe     string
	Payload    []byte
	CreatedAt  time.Time
	EnqueuedAt *time.Time
}

// TableName is the table the migrations create.
func (Event) TableName() string { return "events" }

// Params is one event to emit.
type Params struct {
	MerchantID string
	Type       string
	// ObjectID is the payment or refund the event is about.
	ObjectID string
	// Attempt distinguishes the same transition made again after the
	// object was re-opened (a payment's attempts): the event of one
	// transition is written once, however many times it is reported.
	Attempt int
	// Code distinguishes two transitions of one type within an attempt: a
	// failure's code (a payment released as not_processed whose late
	// charge then comes back declined fails again, with card_declined).
	Code string
	// After distinguishes a transition that can recur within one attempt
	// with nothing else to tell the two apart — a payment released as
	// never charged and back to processing, flagged for review again after
	// that — by when the object entered the state it leaves (its
	// updated_at before the transition). Reported twice, one transition
	// reads the same state and is written once; made again later, it has
	// left another state and is written again.
	After time.Time
	// Object is the object as GET returns it (its view), the event's data:
	// a value to encode, or its encoding as Encoded.
	Object any
}

// Encoded is an object already encoded by encoding/json's Marshal (so
// compact, valid and HTML-escaped): the event carries it as it is.
// json.Marshal would only scan and copy it again (as a json.RawMessage it
// is compacted) to the same bytes — the answer's body, reused as its
// succeeded event's object, is the common case.
type Encoded []byte

// MarshalJSON is e as it is, so an Encoded reached by encoding/json (in a
// struct, say) is its JSON, not base64 of its bytes; nothing as null.
func (e Encoded) MarshalJSON() ([]byte, error) {
	if len(e) == 0 {
		return []byte("null"), nil
	}
	return e, nil
}

// dedupe is what makes p's event unique: the same transition reported
// again (a replayed 202, a webhook and a lookup both settling) writes one.
func (p Params) dedupe() string {
	d := fmt.Sprintf("%s:%s:%d", p.ObjectID, p.Type, p.Attempt)
	if p.Code != "" {
		d += ":" + p.Code
	}
	if !p.After.IsZero() {
		d += "@" + strconv.FormatInt(p.After.UnixMicro(), 10)
	}
	return d
}

// build makes the row of p, with its id and body. The body's created_at
// is this instance's clock synced to the database's (the row's own
// created_at is the database's).
func build(p Params, now time.Time) (Event, error) {
	if p.MerchantID == "" || p.ObjectID == "" || !known(p.Type) {
		return Event{}, fmt.Errorf("events: bad event %q for %q", p.Type, p.ObjectID)
	}
	obj, ok := p.Object.(Encoded)
	if ok && len(obj) == 0 {
		obj = Encoded("null") // as encoding/json makes of an empty json.RawMessage
	}
	if !ok {
		var err error
		if obj, err = json.Marshal(p.Object); err != nil {
			return Event{}, fmt.Errorf("events: %w", err)
		}
	}
	e := Event{MerchantID: p.MerchantID, ID: ids.New("evt_"),
		Type: p.Type, ObjectID: p.ObjectID, Dedupe: p.dedupe()}
	e.Payload = envelope(e.ID, e.Type, now.UTC().Truncate(time.Millisecond), obj)
	return e, nil
}

// envelope is an event's body as delivered (and as GET /v1/events returns
// it): {"id", "object": "event", "type", "created_at", "data": {"object"}},
// byte for byte what encoding/json makes of it (envelope_test.go), written
// out: encoding/json would scan the
// already-encoded obj twice more (as a RawMessage, then inside Data) on
// every payment. id and typ are ASCII without anything JSON escapes (an
// evt_ id, one of Types), and obj is what json.Marshal produced.
func envelope(id, typ string, at time.Time, obj []byte) []byte {
	b := make([]byte, 0, len(obj)+len(id)+len(typ)+96)
	b = append(b, `{"id":"`...)
	b = append(b, id...)
	b = append(b, `","object":"event","type":"`...)
	b = append(b, typ...)
	b = append(b, `","created_at":`...)
	b, _ = at.AppendText(append(b, '"'))
	b = append(b, `","data":{"object":`...)
	b = append(b, obj...)
	return append(b, "}}"...)
}

func known(t string) bool {
	for _, k := range Types {
		if k == t {
			return true
		}
	}
	return false
}

// insertEvent's conflict is the transition's dedupe, named: PostgreSQL
// then probes that one unique index before the insert instead of the
// primary key as well (a tenth of the row's cost, measured), and an event
// id that collided would fail the transition rather than drop its event
// unseen.
const insertEvent = `INSERT INTO events (merchant_id, id, type, object_id, dedupe, payload, created_at, enqueued_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (merchant_id, dedupe) DO NOTHING`

// bornHandedOver is an event's enqueued_at as it is written: NULL (for the
// relay) while the merchant has an endpoint that could hear it, and
// otherwise the event's own time — handed over to nobody, and never
// touched again. An endpoint hears the transitions after its creation
// (one created in the same instant may or may not), and most merchants
// have none: without this every payment's event would cost the relay a
// locking read and a non-HOT update (it leaves the outbox index), the
// PostgreSQL work of a second payment.
func bornHandedOver(db *gorm.DB, merchantID string) clause.Expr {
	return clause.Expr{SQL: `CASE WHEN EXISTS (SELECT 1 FROM webhook_endpoints
  WHERE merchant_id = ? AND disabled_at IS NULL) THEN NULL ELSE ? END`, Vars: []any{merchantID, dbclock.Now(db)}}
}

// Emitter writes events; now stamps their bodies (an instance clock synced
// to the database's).
type Emitter struct{ now func() time.Time }

// NewEmitter returns an emitter stamping bodies with now (nil: time.Now).
func NewEmitter(now func() time.Time) *Emitter {
	if now == nil {
		now = time.Now
	}
	return &Emitter{now: now}
}

// Emit writes the event of p in tx, the transaction of the transition it
// reports. The same transition reported again (same object, type,
// attempt and code) writes nothing.
func (e *Emitter) Emit(ctx context.Context, tx *gorm.DB, p Params) error {
	ev, err := build(p, e.now())
	if err != nil {
		return err
	}
	db := tx.WithContext(ctx)
	if err := db.Exec(insertEvent, ev.MerchantID, ev.ID, ev.Type, ev.ObjectID, ev.Dedupe, ev.Payload, dbclock.Now(db),
		bornHandedOver(db, ev.MerchantID)).Error; err != nil {
		return fmt.Errorf("events: emit %s: %w", p.Type, err)
	}
	return nil
}

// EmitAlong is Emit as a part of another statement (a data-modifying CTE
// of idempotency.Store.CompleteWith): the event is written only if the
// CTE named cond yields a row — the transition applied.
func (e *Emitter) EmitAlong(db *gorm.DB, p Params, cond string) (clause.Expr, error) {
	ev, err := build(p, e.now())
	if err != nil {
		return clause.Expr{}, err
	}
	return clause.Expr{SQL: `INSERT INTO events (merchant_id, id, type, object_id, dedupe, payload, created_at, enqueued_at)
SELECT ?, ?, ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM ` + cond + `) ON CONFLICT (merchant_id, dedupe) DO NOTHING RETURNING 1`,
		Vars: []any{ev.MerchantID, ev.ID, ev.Type, ev.ObjectID, ev.Dedupe, ev.Payload, dbclock.Now(db), bornHandedOver(db, ev.MerchantID)}}, nil
}

// ErrNotFound means no such event (or another merchant's).
var ErrNotFound = errors.New("events: not found")
