package payments

import (
	"context"
	"time"
)

// The operator desk's reads: across merchants, by design. Nothing here is
// on a merchant's path.

// SearchParams selects a page of payments across tenants, newest first.
type SearchParams struct {
	TenantID          string
	Status            Status
	Provider          string
	ProviderReference string
	IdempotencyKey    string // with TenantID: keys are per tenant
	Email             string
	CreatedFrom       *time.Time // inclusive
	CreatedTo         *time.Time // exclusive
	Limit             int
	After             *Cursor
}

// Search returns up to p.Limit+1 payments matching p.
func (s *Store) Search(ctx context.Context, p SearchParams) ([]Payment, error) {
	q := s.exec(ctx, nil)
	if p.TenantID != "" {
		q = q.Where("merchant_id = ?", p.TenantID)
	}
	if p.Status != "" {
		q = q.Where("status = ?", p.Status)
	}
	if p.Provider != "" {
		q = q.Where("provider = ?", p.Provider)
	}
	if p.ProviderReference != "" {
		q = q.Where("provider_reference = ?", p.ProviderReference)
	}
	if p.IdempotencyKey != "" {
		q = q.Where("idempotency_key = ?", p.IdempotencyKey)
	}
	if p.Email != "" {
		q = q.Where("email = ?", p.Email)
	}
	if p.CreatedFrom != nil {
		q = q.Where("created_at >= ?", p.CreatedFrom.UTC())
	}
	if p.CreatedTo != nil {
		q = q.Where("created_at < ?", p.CreatedTo.UTC())
	}
	if p.After != nil {
		q = q.Where("(created_at < ?) OR (created_at = ? AND id < ?)", p.After.CreatedAt, p.After.CreatedAt, p.After.ID)
	}
	var out []Payment
	err := q.Order("created_at DESC, id DESC").Limit(p.Limit + 1).Find(&out).Error
	return out, interpret("search", err)
}

// getAny returns the payment with this id, whoever's it is (the operator
// desk). On a table sharded by merchant it is the one multi-shard read by
// id, and it is never on a merchant's path.
func (s *Store) getAny(ctx context.Context, id string) (Payment, error) {
	var p Payment
	err := s.exec(ctx, nil).Where("id = ?", id).Take(&p).Error
	return p, interpret("get", err)
}

// RefundSearchParams selects a page of refunds across tenants, newest
// first.
type RefundSearchParams struct {
	TenantID       string
	Status         RefundStatus
	IdempotencyKey string // with TenantID: keys are per tenant
	Limit          int
	After          *Cursor
}

// SearchRefunds returns up to p.Limit+1 refunds matching p.
func (s *Store) SearchRefunds(ctx context.Context, p RefundSearchParams) ([]Refund, error) {
	q := s.exec(ctx, nil)
	if p.TenantID != "" {
		q = q.Where("merchant_id = ?", p.TenantID)
	}
	if p.Status != "" {
		q = q.Where("status = ?", p.Status)
	}
	if p.IdempotencyKey != "" {
		q = q.Where("idempotency_key = ?", p.IdempotencyKey)
	}
	if p.After != nil {
		q = q.Where("(created_at < ?) OR (created_at = ? AND id < ?)", p.After.CreatedAt, p.After.CreatedAt, p.After.ID)
	}
	var out []Refund
	err := q.Order("created_at DESC, id DESC").Limit(p.Limit + 1).Find(&out).Error
	return out, interpret("search refunds", err)
}

// getRefundAny returns the refund with this id, whoever's it is (the
// operator desk; a multi-shard read by id, as getAny).
func (s *Store) getRefundAny(ctx context.Context, id string) (Refund, error) {
	var r Refund
	err := s.exec(ctx, nil).Where("id = ?", id).Take(&r).Error
	return r, interpret("get refund", err)
}
