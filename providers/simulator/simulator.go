// Package simulator is an in-process payment provider for development, demos
// and tests. It keeps the providers contract exactly like a real adapter —
// charges are deduplicated by our reference and Lookup works across restarts
// because charges live in the gateway's database (table simulator_charges) —
// and the payment method token chooses what happens:
//
//	sim_success      charged and approved
//	sim_decline      declined (card_declined); a final, replayable answer
//	sim_insufficient declined (insufficient_funds)
//	sim_timeout      charged and approved, but the answer is lost (ErrUnknown),
//	                 as when the network drops the provider's response
//	sim_unavailable  the provider is down and never charges (ErrNotCharged)
//	sim_pending      accepted as pending; it settles as approved after
//	                 SettleAfter, which Lookup (the sweeper) then reports
//	sim_late         accepted, the answer lost, and the charge lands only
//	                 LandAfter later: until then Lookup says not found, as
//	                 a provider with a queued charge does; then approved
//	sim_stuck        accepted as pending and never settled: past
//	                 REVIEW_AFTER the payment goes to review, for an
//	                 operator (the runbook's rehearsal)
//
// Any other token is declined as invalid_payment_method. The simulator is the
// one provider that touches the database: it stands in for the provider's own
// storage, not the gateway's.
package simulator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/providers"
)

// Name is the provider name tenants use.
const Name = "simulator"

// The payment method tokens that choose an outcome.
const (
	TokenSuccess      = "sim_success"
	TokenDecline      = "sim_decline"
	TokenInsufficient = "sim_insufficient"
	TokenTimeout      = "sim_timeout"
	TokenUnavailable  = "sim_unavailable"
	TokenPending      = "sim_pending"
	TokenLate         = "sim_late"
	TokenStuck        = "sim_stuck"
)

// Config tunes the simulator.
type Config struct {
	// Latency is added to every Charge and Lookup, to mimic a network.
	Latency time.Duration
	// SettleAfter is how long a sim_pending charge stays pending.
	SettleAfter time.Duration
	// LandAfter is how long a sim_late charge stays invisible.
	LandAfter time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// charge is one simulated charge, keyed by our reference.
type charge struct {
	Reference     string `gorm:"primaryKey"`
	TransactionID string
	Amount        int64
	Currency      string
	PaymentMethod string
	Status        string
	SettleAt      *time.Time
	CreatedAt     time.Time
}

func (charge) TableName() string { return "simulator_charges" }

// Simulator is the provider. It needs no secrets, so one value serves every
// tenant.
type Simulator struct {
	db  *gorm.DB
	cfg Config
	// rows batches the charge rows of concurrent charges on PostgreSQL.
	rows *batcher
}

// New returns a simulator storing its charges in db.
func New(db *gorm.DB, cfg Config) *Simulator {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.SettleAfter == 0 {
		cfg.SettleAfter = 10 * time.Second
	}
	if cfg.LandAfter == 0 {
		cfg.LandAfter = 10 * time.Minute
	}
	s := &Simulator{db: db, cfg: cfg}
	if db != nil && db.Dialector.Name() == "postgres" {
		s.rows = &batcher{db: db}
	}
	return s
}

// Constructor registers the simulator in a providers.Registry.
func (s *Simulator) Constructor() providers.Constructor {
	return func(providers.Secrets) (providers.Provider, error) { return s, nil }
}

func (s *Simulator) wait(ctx context.Context) error {
	if s.cfg.Latency <= 0 {
		return nil
	}
	t := time.NewTimer(s.cfg.Latency)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		// Like a real network: the request may have been sent.
		return fmt.Errorf("simulator: %w: %v", providers.ErrUnknown, ctx.Err())
	}
}

// Charge implements providers.Provider.
func (s *Simulator) Charge(ctx context.Context, req providers.ChargeRequest) (providers.Result, error) {
	if err := s.wait(ctx); err != nil {
		return providers.Result{}, err
	}
	if req.PaymentMethod == TokenUnavailable {
		return providers.Result{}, fmt.Errorf("simulator: %w: provider unavailable", providers.ErrNotCharged)
	}
	now := s.cfg.Now().UTC()
	c := charge{
		Reference:     req.Reference,
		TransactionID: "sim_" + uuid.Must(uuid.NewV7()).String(),
		Amount:        req.Amount,
		Currency:      req.Currency,
		PaymentMethod: req.PaymentMethod,
		Status:        "succeeded",
		CreatedAt:     now,
	}
	switch req.PaymentMethod {
	case TokenSuccess, TokenTimeout:
	case TokenDecline:
		c.Status = "card_declined"
	case TokenInsufficient:
		c.Status = "insufficient_funds"
	case TokenPending:
		c.Status = "pending"
		at := now.Add(s.cfg.SettleAfter)
		c.SettleAt = &at
	case TokenLate:
		c.Status = "late"
		at := now.Add(s.cfg.LandAfter)
		c.SettleAt = &at
	case TokenStuck:
		c.Status = "pending" // with no settle time: pending for good
	default:
		c.Status = "invalid_payment_method"
	}
	// The dedupe is the provider's unique reference, exactly as at a real
	// provider: a repeated charge finds the first one.
	inserted, err := s.insert(ctx, c)
	if err != nil {
		return providers.Result{}, fmt.Errorf("simulator: %w: %v", providers.ErrUnknown, err)
	}
	if !inserted {
		return s.Lookup(ctx, req.Reference)
	}
	if req.PaymentMethod == TokenTimeout || req.PaymentMethod == TokenLate {
		return providers.Result{}, fmt.Errorf("simulator: %w: response lost after charging", providers.ErrUnknown)
	}
	return s.result(c), nil
}

// insert writes c's row and reports whether it was new (a repeated
// reference finds the first charge's row).
func (s *Simulator) insert(ctx context.Context, c charge) (bool, error) {
	if s.rows != nil {
		return s.rows.insert(ctx, c)
	}
	res := s.db.WithContext(ctx).Exec(insertCharge, c.Reference, c.TransactionID, c.Amount, c.Currency, c.PaymentMethod, c.Status, c.SettleAt, c.CreatedAt)
	return res.RowsAffected == 1, res.Error
}

// Lookup implements providers.Provider. It only reads.
func (s *Simulator) Lookup(ctx context.Context, reference string) (providers.Result, error) {
	if err := s.wait(ctx); err != nil {
		return providers.Result{}, err
	}
	var c charge
	err := s.db.WithContext(ctx).Where("reference = ?", reference).Take(&c).Error
	if errors.Is(err, gorm.ErrRecordNotFound) || (err == nil && c.Status == "late" && s.cfg.Now().Before(*c.SettleAt)) {
		return providers.Result{Outcome: providers.OutcomeNotFound}, nil
	}
	if err != nil {
		return providers.Result{}, fmt.Errorf("simulator: %w: %v", providers.ErrUnknown, err)
	}
	return s.result(c), nil
}

func (s *Simulator) result(c charge) providers.Result {
	r := providers.Result{TransactionID: c.TransactionID, Amount: c.Amount, Currency: c.Currency}
	switch c.Status {
	case "succeeded", "late": // a late charge, once it has landed
		r.Outcome = providers.OutcomeSucceeded
	case "pending":
		r.Outcome = providers.OutcomePending
		if c.SettleAt != nil && !s.cfg.Now().Before(*c.SettleAt) {
			r.Outcome = providers.OutcomeSucceeded
		}
	default:
		r.Outcome = providers.OutcomeFailed
		r.FailureCode = c.Status
		r.FailureMessage = map[string]string{
			"card_declined":          "The card was declined.",
			"insufficient_funds":     "The card has insufficient funds.",
			"invalid_payment_method": "The payment method is not a simulator token (sim_success, sim_decline, ...).",
		}[c.Status]
	}
	return r
}

// VerifyWebhook implements providers.Provider. The simulator sends no
// webhooks, so nothing claiming to be one is authentic.
func (s *Simulator) VerifyWebhook(http.Header, []byte) (providers.Event, error) {
	return providers.Event{}, fmt.Errorf("simulator: %w", providers.ErrNoWebhooks)
}

// Charges counts the charges stored for a reference (0 or 1, by the dedupe),
// for tests and the chaos run.
func (s *Simulator) Charges(ctx context.Context, reference string) (int, error) {
	var n int64
	err := s.db.WithContext(ctx).Model(&charge{}).Where("reference = ?", reference).Count(&n).Error
	return int(n), err
}

// refund is one simulated refund, keyed by our refund reference.
type refund struct {
	Reference       string `gorm:"primaryKey"`
	ChargeReference string
	RefundID        string
	Amount          int64
	Status          string
	SettleAt        *time.Time
	CreatedAt       time.Time
}

func (refund) TableName() string { return "simulator_refunds" }

// The refund reasons that choose what happens to a simulated refund, as
// the payment method token does for a charge; any other reason refunds.
const (
	RefundTimeout     = "sim_timeout"     // refunded, the answer lost
	RefundPending     = "sim_pending"     // pending until SettleAfter, then succeeded
	RefundDecline     = "sim_decline"     // refused (failed)
	RefundUnavailable = "sim_unavailable" // the provider is down: nothing refunded
)

// Refund implements providers.Provider. Like a real provider it refunds
// only a charge that succeeded, never more than was charged in all, and a
// repeated refund reference finds the first refund.
func (s *Simulator) Refund(ctx context.Context, req providers.RefundRequest) (providers.RefundResult, error) {
	if err := s.wait(ctx); err != nil {
		return providers.RefundResult{}, err
	}
	if req.Reason == RefundUnavailable {
		return providers.RefundResult{}, fmt.Errorf("simulator: %w: provider unavailable", providers.ErrNotCharged)
	}
	now := s.cfg.Now().UTC()
	r := refund{Reference: req.Reference, ChargeReference: req.ChargeReference, RefundID: "simre_" + uuid.Must(uuid.NewV7()).String(),
		Amount: req.Amount, Status: "succeeded", CreatedAt: now}
	switch req.Reason {
	case RefundDecline:
		r.Status = "declined"
	case RefundPending:
		at := now.Add(s.cfg.SettleAfter)
		r.Status, r.SettleAt = "pending", &at
	}
	var inserted bool
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var c charge
		if err := tx.Where("reference = ?", req.ChargeReference).Take(&c).Error; err != nil {
			if errors.Is(err, gorm.ErrRecordNotFound) {
				r.Status = "no_charge"
			} else {
				return err
			}
		} else if s.result(c).Outcome != providers.OutcomeSucceeded {
			r.Status = "not_refundable"
		} else if r.Status != "declined" {
			var refunded int64
			if err := tx.Model(&refund{}).Where("charge_reference = ? AND status IN ?", req.ChargeReference,
				[]string{"succeeded", "pending"}).Select("COALESCE(SUM(amount), 0)").Scan(&refunded).Error; err != nil {
				return err
			}
			if refunded+req.Amount > c.Amount {
				r.Status = "exceeds_charge"
			}
		}
		res := tx.Exec(`INSERT INTO simulator_refunds (reference, charge_reference, refund_id, amount, status, settle_at, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`, r.Reference, r.ChargeReference, r.RefundID, r.Amount, r.Status, r.SettleAt, r.CreatedAt)
		inserted = res.RowsAffected == 1
		return res.Error
	})
	if err != nil {
		return providers.RefundResult{}, fmt.Errorf("simulator: %w: %v", providers.ErrUnknown, err)
	}
	if !inserted {
		return s.LookupRefund(ctx, providers.RefundLookup{Reference: req.Reference, ChargeReference: req.ChargeReference})
	}
	if req.Reason == RefundTimeout {
		return providers.RefundResult{}, fmt.Errorf("simulator: %w: response lost after refunding", providers.ErrUnknown)
	}
	return s.refundResult(r), nil
}

// DedupesRefunds marks the simulator a providers.RefundDeduper: a
// repeated refund reference finds the first refund.
func (s *Simulator) DedupesRefunds() {}

// DedupesCharges: one charge per reference.
func (s *Simulator) DedupesCharges() {}

// LookupRefund implements providers.Provider. It only reads.
func (s *Simulator) LookupRefund(ctx context.Context, req providers.RefundLookup) (providers.RefundResult, error) {
	if err := s.wait(ctx); err != nil {
		return providers.RefundResult{}, err
	}
	var r refund
	err := s.db.WithContext(ctx).Where("reference = ?", req.Reference).Take(&r).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return providers.RefundResult{Outcome: providers.OutcomeNotFound}, nil
	}
	if err != nil {
		return providers.RefundResult{}, fmt.Errorf("simulator: %w: %v", providers.ErrUnknown, err)
	}
	return s.refundResult(r), nil
}

func (s *Simulator) refundResult(r refund) providers.RefundResult {
	res := providers.RefundResult{RefundID: r.RefundID}
	switch r.Status {
	case "succeeded":
		res.Outcome = providers.OutcomeSucceeded
	case "pending":
		res.Outcome = providers.OutcomePending
		if r.SettleAt != nil && !s.cfg.Now().Before(*r.SettleAt) {
			res.Outcome = providers.OutcomeSucceeded
		}
	default:
		res.Outcome = providers.OutcomeFailed
		res.FailureCode = r.Status
		res.FailureMessage = map[string]string{
			"declined":       "The refund was declined.",
			"no_charge":      "There is no charge with that reference.",
			"not_refundable": "The charge did not succeed; there is nothing to refund.",
			"exceeds_charge": "The refund exceeds what is left of the charge.",
		}[r.Status]
	}
	return res
}

// Refunds counts the refunds stored for a refund reference (0 or 1), for
// tests and the chaos run.
func (s *Simulator) Refunds(ctx context.Context, reference string) (int, error) {
	var n int64
	err := s.db.WithContext(ctx).Model(&refund{}).Where("reference = ?", reference).Count(&n).Error
	return int(n), err
}

const insertCharge = `INSERT INTO simulator_charges
  (reference, transaction_id, amount, currency, payment_method, status, settle_at, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`
