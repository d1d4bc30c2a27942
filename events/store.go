package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/oncepay/gateway/app/database/dbclock"
)

// Store keeps events, endpoints and deliveries; every statement names the
// merchant (the tables' keys lead with merchant_id), but for the relay's
// and the purge's one fan-out read of which merchants have work.
type Store struct{ db *gorm.DB }

// NewStore returns a store over db.
func NewStore(db *gorm.DB) *Store { return &Store{db: db} }

func interpret(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, gorm.ErrRecordNotFound):
		return ErrNotFound
	default:
		return fmt.Errorf("events: %s: %w", op, err)
	}
}

// Cursor is a position in a listing, newest first.
type Cursor struct {
	CreatedAt time.Time
	ID        string
}

// ListParams selects a page of a merchant's events.
type ListParams struct {
	Type        string
	CreatedFrom *time.Time
	Limit       int
	After       *Cursor
}

// List returns up to p.Limit+1 of the merchant's events of the last 30
// days, newest first.
func (s *Store) List(ctx context.Context, merchantID string, p ListParams) ([]Event, error) {
	db := s.db.WithContext(ctx)
	q := db.Where("merchant_id = ? AND created_at >= ?", merchantID, dbclock.Minus(db, Retention))
	if p.Type != "" {
		q = q.Where("type = ?", p.Type)
	}
	if p.CreatedFrom != nil {
		q = q.Where("created_at >= ?", p.CreatedFrom.UTC())
	}
	if p.After != nil {
		q = q.Where("(created_at < ?) OR (created_at = ? AND id < ?)", p.After.CreatedAt, p.After.CreatedAt, p.After.ID)
	}
	var out []Event
	err := q.Order("created_at DESC, id DESC").Limit(p.Limit + 1).Find(&out).Error
	return out, interpret("list", err)
}

// Get returns one of the merchant's events.
func (s *Store) Get(ctx context.Context, merchantID, id string) (Event, error) {
	var e Event
	err := s.db.WithContext(ctx).Where("merchant_id = ? AND id = ?", merchantID, id).Take(&e).Error
	return e, interpret("get", err)
}

// Endpoint is one row of webhook_endpoints. Secret and OldSecret are
// sealed (secretbox); an endpoint is never listed with them.
type Endpoint struct {
	MerchantID     string `gorm:"primaryKey"`
	ID             string `gorm:"primaryKey"`
	URL            string
	Events         string // a JSON array of types; [] is every type
	Description    string
	Secret         []byte
	OldSecret      []byte
	OldSecretUntil *time.Time
	DisabledAt     *time.Time
	FailingSince   *time.Time
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

// TableName is the table the migrations create.
func (Endpoint) TableName() string { return "webhook_endpoints" }

// types is the endpoint's subscription.
func (e *Endpoint) types() []string {
	var t []string
	_ = json.Unmarshal([]byte(e.Events), &t)
	return t
}

// Wants reports whether the endpoint takes events of type t.
func (e *Endpoint) Wants(t string) bool {
	types := e.types()
	if len(types) == 0 {
		return true
	}
	for _, x := range types {
		if x == t {
			return true
		}
	}
	return false
}

func (s *Store) exec(ctx context.Context, tx *gorm.DB) *gorm.DB {
	if tx == nil {
		tx = s.db
	}
	return tx.WithContext(ctx)
}

func (s *Store) insertEndpoint(ctx context.Context, tx *gorm.DB, e *Endpoint) error {
	return interpret("insert endpoint", s.exec(ctx, tx).Create(e).Error)
}

// endpoint returns one of the merchant's endpoints.
func (s *Store) endpoint(ctx context.Context, tx *gorm.DB, merchantID, id string) (Endpoint, error) {
	var e Endpoint
	err := s.exec(ctx, tx).Where("merchant_id = ? AND id = ?", merchantID, id).Take(&e).Error
	return e, interpret("endpoint", err)
}

// endpoints returns the merchant's endpoints, oldest first.
func (s *Store) endpoints(ctx context.Context, tx *gorm.DB, merchantID string) ([]Endpoint, error) {
	var out []Endpoint
	err := s.exec(ctx, tx).Where("merchant_id = ?", merchantID).Order("created_at, id").Limit(100).Find(&out).Error
	return out, interpret("endpoints", err)
}

// lockEndpoints serialises changes to one merchant's set of endpoints
// until tx ends, so the cap is counted and kept in one step: two creates
// that both counted 15 would otherwise both insert. PostgreSQL only: a
// SQLite transaction begins IMMEDIATE, so there writers never interleave.
func (s *Store) lockEndpoints(ctx context.Context, tx *gorm.DB, merchantID string) error {
	db := s.exec(ctx, tx)
	if db.Dialector.Name() != "postgres" {
		return nil
	}
	err := db.Exec("SELECT pg_advisory_xact_lock(hashtextextended(?, 0))", "webhook_endpoints/"+merchantID).Error
	return interpret("lock endpoints", err)
}

func (s *Store) updateEndpoint(ctx context.Context, tx *gorm.DB, merchantID, id string, cols map[string]any) error {
	res := s.exec(ctx, tx).Model(&Endpoint{}).Where("merchant_id = ? AND id = ?", merchantID, id).Updates(cols)
	if res.Error == nil && res.RowsAffected == 0 {
		return ErrNotFound
	}
	return interpret("update endpoint", res.Error)
}

// rotateSecret makes sealed the endpoint's secret and its secret until
// now the old one, which signs beside it until until. The old one is the
// row's secret as the UPDATE finds it, not as the caller read it: a
// rotation or a re-seal (gateway reseal) committed in between is kept, not
// overwritten with what it replaced.
func (s *Store) rotateSecret(ctx context.Context, tx *gorm.DB, merchantID, id string, sealed []byte, until, now time.Time) error {
	return s.updateEndpoint(ctx, tx, merchantID, id, map[string]any{
		"secret": sealed, "old_secret": gorm.Expr("secret"), "old_secret_until": until, "updated_at": now})
}

// endStreak ends an endpoint's failing streak (a delivery succeeded).
func (s *Store) endStreak(ctx context.Context, merchantID, id string) error {
	return interpret("end streak", s.db.WithContext(ctx).Exec(`UPDATE webhook_endpoints SET failing_since = NULL
WHERE merchant_id = ? AND id = ? AND failing_since IS NOT NULL`, merchantID, id).Error)
}

// startStreak starts a failing streak at now, unless one is running.
func (s *Store) startStreak(ctx context.Context, merchantID, id string, now time.Time) error {
	return interpret("start streak", s.db.WithContext(ctx).Exec(`UPDATE webhook_endpoints SET failing_since = ?
WHERE merchant_id = ? AND id = ? AND failing_since IS NULL`, now, merchantID, id).Error)
}

// disableFailing disables the endpoint if it is enabled and has failed
// since before since; it reports whether this call disabled it.
func (s *Store) disableFailing(ctx context.Context, tx *gorm.DB, merchantID, id string, now, since time.Time) (bool, error) {
	res := s.exec(ctx, tx).Exec(`UPDATE webhook_endpoints SET disabled_at = ?, updated_at = ?
WHERE merchant_id = ? AND id = ? AND disabled_at IS NULL AND failing_since IS NOT NULL AND failing_since <= ?`,
		now, now, merchantID, id, since)
	return res.RowsAffected == 1, interpret("disable endpoint", res.Error)
}

func (s *Store) deleteEndpoint(ctx context.Context, tx *gorm.DB, merchantID, id string) error {
	res := s.exec(ctx, tx).Where("merchant_id = ? AND id = ?", merchantID, id).Delete(&Endpoint{})
	if res.Error == nil && res.RowsAffected == 0 {
		return ErrNotFound
	}
	return interpret("delete endpoint", res.Error)
}

// Delivery is one attempt to deliver an event to an endpoint.
type Delivery struct {
	MerchantID string    `gorm:"primaryKey" json:"-"`
	ID         string    `gorm:"primaryKey" json:"id" example:"dlv_0f1e2d3c4b5a69788796a5b4c3d2e1f0"`
	EndpointID string    `json:"endpoint_id" example:"we_0f1e2d3c4b5a69788796a5b4c3d2e1f0"`
	EventID    string    `json:"event_id" example:"evt_0f1e2d3c4b5a69788796a5b4c3d2e1f0"`
	Attempt    int       `json:"attempt" example:"1"`
	At         time.Time `json:"at" format:"date-time"`
	StatusCode int       `json:"status_code" example:"200"`
	LatencyMS  int64     `gorm:"column:latency_ms" json:"latency_ms" example:"84"`
	Error      string    `json:"error,omitempty" example:"timeout after 10s"`
	// Outcome: delivered (a 2xx), retrying (another attempt is scheduled),
	// failed (the last attempt failed), or skipped (the endpoint was
	// disabled or deleted meanwhile).
	Outcome string `json:"outcome" example:"delivered" enums:"delivered,retrying,failed,skipped"`
} // @name WebhookDelivery

// TableName is the table the migrations create.
func (Delivery) TableName() string { return "webhook_deliveries" }

func (s *Store) insertDelivery(ctx context.Context, d *Delivery) error {
	db := s.db.WithContext(ctx)
	return interpret("insert delivery", db.Exec(`INSERT INTO webhook_deliveries
  (merchant_id, id, endpoint_id, event_id, attempt, at, status_code, latency_ms, error, outcome)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, d.MerchantID, d.ID, d.EndpointID, d.EventID, d.Attempt, dbclock.Now(db),
		d.StatusCode, d.LatencyMS, d.Error, d.Outcome).Error)
}

// Deliveries returns up to limit+1 of an endpoint's delivery attempts,
// newest first, after the cursor when one is given.
func (s *Store) Deliveries(ctx context.Context, merchantID, endpointID string, limit int, after *Cursor) ([]Delivery, error) {
	q := s.db.WithContext(ctx).Where("merchant_id = ? AND endpoint_id = ?", merchantID, endpointID)
	if after != nil {
		q = q.Where("(at < ?) OR (at = ? AND id < ?)", after.CreatedAt, after.CreatedAt, after.ID)
	}
	var out []Delivery
	err := q.Order("at DESC, id DESC").Limit(limit + 1).Find(&out).Error
	return out, interpret("deliveries", err)
}

// pendingMerchants lists merchants with events not yet handed to the
// queue (the relay's fan-out read: lock-free, one per run).
func (s *Store) pendingMerchants(ctx context.Context, limit int) ([]string, error) {
	var out []string
	err := s.db.WithContext(ctx).Raw(`SELECT merchant_id FROM events WHERE enqueued_at IS NULL
GROUP BY merchant_id ORDER BY min(created_at) LIMIT ?`, limit).Scan(&out).Error
	return out, interpret("pending merchants", err)
}

// takePending locks up to limit of a merchant's events not yet handed to
// the queue (SKIP LOCKED on PostgreSQL: concurrent relays take disjoint
// sets), oldest first.
func (s *Store) takePending(ctx context.Context, tx *gorm.DB, merchantID string, limit int) ([]Event, error) {
	q := tx.WithContext(ctx)
	if q.Dialector.Name() == "postgres" {
		q = q.Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate, Options: clause.LockingOptionsSkipLocked})
	}
	var out []Event
	err := q.Where("merchant_id = ? AND enqueued_at IS NULL", merchantID).Order("created_at, id").Limit(limit).Find(&out).Error
	return out, interpret("take pending", err)
}

func (s *Store) markEnqueued(ctx context.Context, tx *gorm.DB, merchantID string, ids []string) error {
	db := tx.WithContext(ctx)
	return interpret("mark enqueued", db.Model(&Event{}).Where("merchant_id = ? AND id IN ?", merchantID, ids).
		Update("enqueued_at", dbclock.Now(db)).Error)
}

// purge deletes events older than Retention (and their deliveries'
// log), merchant by merchant, in bounded batches.
func (s *Store) purge(ctx context.Context, batch int) (int64, error) {
	db := s.db.WithContext(ctx)
	// Merchant by merchant from the tenants (a reference table when
	// sharded), so each statement below is one merchant's, by index.
	var merchants []string
	if err := db.Raw(`SELECT id FROM tenants ORDER BY id`).Scan(&merchants).Error; err != nil {
		return 0, interpret("purge", err)
	}
	// Each in batches, so no statement holds many rows' locks or runs
	// past the job's timeout.
	batched := []struct {
		events bool
		sql    string
	}{
		{true, `DELETE FROM events WHERE merchant_id = ? AND id IN (
  SELECT id FROM events WHERE merchant_id = ? AND created_at < ? AND enqueued_at IS NOT NULL LIMIT ?)`},
		{false, `DELETE FROM webhook_deliveries WHERE merchant_id = ? AND id IN (
  SELECT id FROM webhook_deliveries WHERE merchant_id = ? AND at < ? LIMIT ?)`},
	}
	var n int64
	for _, m := range merchants {
		for _, q := range batched {
			for {
				res := db.Exec(q.sql, m, m, dbclock.Minus(db, Retention), batch)
				if res.Error != nil {
					return n, interpret("purge", res.Error)
				}
				if q.events {
					n += res.RowsAffected
				}
				if res.RowsAffected < int64(batch) {
					break
				}
			}
		}
	}
	return n, nil
}
