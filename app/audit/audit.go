// Package audit is the operators' append-only log: every admin action —
// a tenant created, updated, suspended or reactivated, credentials
// rotated, provider secrets changed (their names, never their values), a
// payment or refund resolved — with its time, action, target, request id, and the
// non-secret fields before and after.
//
// An event is written by Record in the transaction of the change it
// describes, so a change and its event commit (or roll back) together.
// Nothing updates or deletes an event: the package has no such method,
// and the API only lists them.
package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/database/dbclock"
	"github.com/oncepay/gateway/app/ids"
)

// Actions recorded.
const (
	TenantCreated      = "tenant.created"
	TenantUpdated      = "tenant.updated"
	TenantSuspended    = "tenant.suspended"
	TenantReactivated  = "tenant.reactivated"
	CredentialsRotated = "tenant.credentials_rotated"
	ProviderSecretsSet = "tenant.provider_secrets_changed"
	PaymentResolved    = "payment.resolved"
	RefundResolved     = "refund.resolved"
	// A resolution the provider's answer ruled out (409
	// provider_disagrees): nothing changed, but an operator tried it.
	PaymentResolutionRefused = "payment.resolution_refused"
	RefundResolutionRefused  = "refund.resolution_refused"
	EndpointDisabled         = "webhook_endpoint.disabled"
	// `gateway reseal` (a MASTER_KEY rotation's step 3), run by an
	// operator beside the serving instances: every secret it rewrote.
	MasterKeyResealed     = "master_key.resealed"
	actorCommand          = "operator:command"
	actorAdmin            = "admin"
	actorAdminPrevious    = "admin:previous_key"
	actorSystem           = "system"
	maxNote               = 1000
	defaultLimit          = 50
	maxLimit              = 200
	requestIDContextKey   = ctxKey("request_id")
	previousKeyContextKey = ctxKey("previous_admin_key")
)

type ctxKey string

// Actions lists every action, for validating a filter.
var Actions = []string{TenantCreated, TenantUpdated, TenantSuspended, TenantReactivated,
	CredentialsRotated, ProviderSecretsSet, PaymentResolved, RefundResolved, PaymentResolutionRefused,
	RefundResolutionRefused, EndpointDisabled, MasterKeyResealed}

// Event is one row of audit_events.
type Event struct {
	ID string    `gorm:"primaryKey" json:"id" example:"aud_0f1e2d3c4b5a69788796a5b4c3d2e1f0"`
	At time.Time `json:"at" format:"date-time" example:"2026-12-03T10:00:00Z"`
	// Actor is admin (ADMIN_API_KEY), admin:previous_key
	// (ADMIN_API_KEY_PREVIOUS, during a rotation), operator:command (an
	// operator's gateway command, such as reseal) or system (the gateway
	// on its own).
	Actor      string `json:"actor" example:"admin"`
	Action     string `json:"action" example:"tenant.suspended"`
	TargetType string `json:"target_type" example:"tenant"`
	TargetID   string `json:"target_id" example:"ten_df4a0c1b2e3f405162738495"`
	TenantID   string `json:"tenant_id,omitempty" example:"ten_df4a0c1b2e3f405162738495"`
	RequestID  string `json:"request_id,omitempty" example:"5f0b7c2e-8d1a-4e3b-9c6d-7a8b9c0d1e2f"`
	// Before and After are the target's non-secret fields around the change.
	Before json.RawMessage `gorm:"serializer:json;type:text" json:"before" swaggertype:"object"`
	After  json.RawMessage `gorm:"serializer:json;type:text" json:"after" swaggertype:"object"`
	Note   string          `json:"note,omitempty" example:"checked at the provider's dashboard"`
} // @name AuditEvent

// TableName is the table the migrations create.
func (Event) TableName() string { return "audit_events" }

// WithRequestID puts the request's id in ctx, for the events recorded
// while serving it.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDContextKey, id)
}

// WithPreviousAdminKey marks ctx as a request made with
// ADMIN_API_KEY_PREVIOUS: its changes are recorded with the actor
// "admin:previous_key", so the log tells which key made each change while
// both are accepted (a key being rotated out may be the one that leaked).
func WithPreviousAdminKey(ctx context.Context) context.Context {
	return context.WithValue(ctx, previousKeyContextKey, true)
}

// Change describes one admin action for Record. Before and After are
// marshalled to JSON; pass only non-secret fields.
type Change struct {
	Action     string
	TargetType string
	TargetID   string
	TenantID   string
	Before     any
	After      any
	Note       string
	// System marks a change the gateway made on its own (actor "system"),
	// not an operator's.
	System bool
	// Command marks a change an operator made with a gateway command
	// (actor "operator:command"), not through the admin API.
	Command bool
}

// Record writes the event of c in tx — the transaction of the change
// itself — stamped with the database's time.
func Record(ctx context.Context, tx *gorm.DB, c Change) error {
	enc := func(v any) (string, error) {
		if v == nil {
			return "{}", nil
		}
		b, err := json.Marshal(v)
		return string(b), err
	}
	before, err := enc(c.Before)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	after, err := enc(c.After)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	rid, _ := ctx.Value(requestIDContextKey).(string)
	actor := actorAdmin
	if previous, _ := ctx.Value(previousKeyContextKey).(bool); previous {
		actor = actorAdminPrevious
	}
	if c.System {
		actor = actorSystem
	}
	if c.Command {
		actor = actorCommand
	}
	db := tx.WithContext(ctx)
	err = db.Exec(`INSERT INTO audit_events (id, at, actor, action, target_type, target_id, tenant_id, request_id, before, after, note)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		ids.New("aud_"), dbclock.Now(db), actor, c.Action, c.TargetType, c.TargetID,
		c.TenantID, rid, before, after, truncate(c.Note, maxNote)).Error
	if err != nil {
		return fmt.Errorf("audit: record %s: %w", c.Action, err)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && (s[n]&0xC0) == 0x80 {
		n--
	}
	return s[:n]
}

// Filter selects a page of events, newest first.
type Filter struct {
	TenantID string
	Action   string
	// TargetID is one object's events: a payment's or refund's
	// resolutions, a tenant's changes ("what happened to pay_…?").
	TargetID string
	Limit    int
	// After continues a listing: events older than this one.
	After *Position
}

// Position is an event's place in the listing.
type Position struct {
	At time.Time
	ID string
}

// ErrBadFilter is a filter the store refuses.
var ErrBadFilter = errors.New("audit: bad filter")

// Store reads the log.
type Store struct{ db *gorm.DB }

// NewStore returns a store over db.
func NewStore(db *gorm.DB) *Store { return &Store{db: db} }

// List returns up to f.Limit events (and whether there are more), newest
// first, across tenants unless f.TenantID is set.
func (s *Store) List(ctx context.Context, f Filter) ([]Event, bool, error) {
	if f.Limit <= 0 {
		f.Limit = defaultLimit
	}
	if f.Limit > maxLimit {
		return nil, false, ErrBadFilter
	}
	q := s.db.WithContext(ctx).Model(&Event{})
	if f.TenantID != "" {
		q = q.Where("tenant_id = ?", f.TenantID)
	}
	if f.Action != "" {
		q = q.Where("action = ?", f.Action)
	}
	if f.TargetID != "" {
		q = q.Where("target_id = ?", f.TargetID)
	}
	if f.After != nil {
		q = q.Where("(at < ?) OR (at = ? AND id < ?)", f.After.At, f.After.At, f.After.ID)
	}
	var out []Event
	if err := q.Order("at DESC, id DESC").Limit(f.Limit + 1).Find(&out).Error; err != nil {
		return nil, false, fmt.Errorf("audit: list: %w", err)
	}
	more := len(out) > f.Limit
	if more {
		out = out[:f.Limit]
	}
	return out, more, nil
}
