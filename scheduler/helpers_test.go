package scheduler_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/database"
	"github.com/oncepay/gateway/idempotency"
	"github.com/oncepay/gateway/payments"
	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/scheduler"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// fakeProvider answers Lookup with lookup(ctx, reference) and counts the
// calls per reference. Charge must never be called by a settler.
type fakeProvider struct {
	lookup func(ctx context.Context, ref string) (providers.Result, error)

	mu      sync.Mutex
	lookups map[string]int
	charges int
}

func newFake(lookup func(ctx context.Context, ref string) (providers.Result, error)) *fakeProvider {
	return &fakeProvider{lookup: lookup, lookups: map[string]int{}}
}

func (f *fakeProvider) Charge(context.Context, providers.ChargeRequest) (providers.Result, error) {
	f.mu.Lock()
	f.charges++
	f.mu.Unlock()
	return providers.Result{}, fmt.Errorf("fake: %w: settlers never charge", providers.ErrNotCharged)
}

func (f *fakeProvider) Lookup(ctx context.Context, ref string) (providers.Result, error) {
	f.mu.Lock()
	f.lookups[ref]++
	f.mu.Unlock()
	res, err := f.lookup(ctx, ref)
	if res.Outcome.Final() && res.Currency == "" {
		// The charge as a provider reports it: seed's, 5000 NGN.
		res.Amount, res.Currency = 5000, "NGN"
	}
	return res, err
}

func (f *fakeProvider) Refund(context.Context, providers.RefundRequest) (providers.RefundResult, error) {
	return providers.RefundResult{}, providers.ErrNotCharged
}

func (f *fakeProvider) LookupRefund(context.Context, providers.RefundLookup) (providers.RefundResult, error) {
	return providers.RefundResult{Outcome: providers.OutcomeNotFound}, nil
}

func (f *fakeProvider) VerifyWebhook(http.Header, []byte) (providers.Event, error) {
	return providers.Event{}, providers.ErrBadSignature
}

func (f *fakeProvider) counts() (lookups map[string]int, charges int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int, len(f.lookups))
	for k, v := range f.lookups {
		out[k] = v
	}
	return out, f.charges
}

// accounts gives every merchant the same provider.
type accounts struct{ p providers.Provider }

func (a accounts) Provider(context.Context, string, string) (providers.Provider, error) {
	return a.p, nil
}

// instance is one gateway's worth of sweeper state on its own pool.
type instance struct {
	db      *gorm.DB
	keys    *idempotency.Store
	service *payments.Service
}

func newInstance(t testing.TB, dsn string, p providers.Provider, maxConns int) instance {
	t.Helper()
	db, err := database.Open(dsn, database.Options{MaxOpenConns: maxConns})
	require.NoError(t, err)
	t.Cleanup(func() { _ = database.Close(db) })
	return instanceOn(db, p)
}

func instanceOn(db *gorm.DB, p providers.Provider) instance {
	keys := idempotency.NewStore(db)
	svc := payments.NewService(db, keys, accounts{p}, payments.Config{
		Lease: 30 * time.Second, ReviewAfter: 24 * time.Hour, Log: quiet,
	})
	return instance{db: db, keys: keys, service: svc}
}

func (in instance) config(batch int) scheduler.Config {
	return scheduler.Config{
		DB: in.db, Keys: in.keys, Settler: in.service, Log: quiet,
		StaleAfter: 5 * time.Minute, SweepBatch: batch, Lease: 30 * time.Second,
	}
}

// stuck describes a key left in progress by a request that died.
type stuck struct {
	merchant, key string
	age           time.Duration // since the key (and payment) were created
	leaseLeft     time.Duration // locked_until - now; negative: lapsed
	payment       *payments.Status
	failureCode   string
	status        idempotency.Status // default in_progress
	completedAgo  time.Duration      // for done keys
}

func status(s payments.Status) *payments.Status { return &s }

// seed writes keys (and their payments) in batches.
func seed(t testing.TB, db *gorm.DB, rows []stuck) {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Microsecond)
	var recs []idempotency.Record
	var pays []payments.Payment
	for i, r := range rows {
		created := now.Add(-r.age)
		rec := idempotency.Record{
			MerchantID: r.merchant, Key: r.key, RequestHash: "h", Status: idempotency.StatusInProgress,
			LockedUntil: now.Add(r.leaseLeft), LockToken: fmt.Sprintf("dead-%d", i), CreatedAt: created,
			AttemptedAt: &created,
		}
		if r.status == idempotency.StatusDone {
			done := now.Add(-r.completedAgo)
			rec.Status, rec.CompletedAt = idempotency.StatusDone, &done
			rec.StatusCode, rec.Body = 201, []byte(`{"stored":true}`)
		}
		if r.payment != nil {
			id := fmt.Sprintf("pay_%s_%s", r.merchant, r.key)
			rec.ResourceID = id
			pays = append(pays, payments.Payment{
				ID: id, MerchantID: r.merchant, IdempotencyKey: r.key, Amount: 5000, Currency: "NGN",
				Status: *r.payment, FailureCode: r.failureCode, Provider: "fake",
				ProviderReference: providers.Reference(r.merchant, r.key), Email: "ada@example.com",
				PaymentMethod: "tok", Metadata: "{}", Attempts: 1, CreatedAt: created, UpdatedAt: created,
			})
		}
		recs = append(recs, rec)
	}
	require.NoError(t, db.CreateInBatches(recs, 200).Error)
	if len(pays) > 0 {
		require.NoError(t, db.CreateInBatches(pays, 200).Error)
	}
}

func getKey(t *testing.T, db *gorm.DB, merchant, key string) (*idempotency.Record, bool) {
	t.Helper()
	rec, err := idempotency.NewStore(db).Get(context.Background(), merchant, key)
	if err == idempotency.ErrNotFound {
		return nil, false
	}
	require.NoError(t, err)
	return rec, true
}

func getPayment(t *testing.T, db *gorm.DB, merchant, key string) payments.Payment {
	t.Helper()
	p, err := payments.NewStore(db).GetByKey(context.Background(), nil, merchant, key)
	require.NoError(t, err)
	return p
}

func count(t *testing.T, db *gorm.DB, table, where string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.Table(table).Where(where, args...).Count(&n).Error)
	return n
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for: %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
