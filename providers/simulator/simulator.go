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
	return &Simulator{db: db, cfg: cfg}
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
		TransactionID: "sim_" + uuid.NewString(),
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
	default:
		c.Status = "invalid_payment_method"
	}
	// The dedupe is the provider's unique reference, exactly as at a real
	// provider: a repeated charge finds the first one.
	res := s.db.WithContext(ctx).Exec(`INSERT INTO simulator_charges
  (reference, transaction_id, amount, currency, payment_method, status, settle_at, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
		c.Reference, c.TransactionID, c.Amount, c.Currency, c.PaymentMethod, c.Status, c.SettleAt, c.CreatedAt)
	if res.Error != nil {
		return providers.Result{}, fmt.Errorf("simulator: %w: %v", providers.ErrUnknown, res.Error)
	}
	if res.RowsAffected == 0 {
		return s.Lookup(ctx, req.Reference)
	}
	if req.PaymentMethod == TokenTimeout || req.PaymentMethod == TokenLate {
		return providers.Result{}, fmt.Errorf("simulator: %w: response lost after charging", providers.ErrUnknown)
	}
	return s.result(c), nil
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
	r := providers.Result{TransactionID: c.TransactionID}
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
	return providers.Event{}, fmt.Errorf("simulator: %w: the simulator sends no webhooks", providers.ErrBadSignature)
}

// Charges counts the charges stored for a reference (0 or 1, by the dedupe),
// for tests and the chaos run.
func (s *Simulator) Charges(ctx context.Context, reference string) (int, error) {
	var n int64
	err := s.db.WithContext(ctx).Model(&charge{}).Where("reference = ?", reference).Count(&n).Error
	return int(n), err
}
