package providers

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

type stubProvider struct{ s Secrets }

func (stubProvider) Charge(context.Context, ChargeRequest) (Result, error) { return Result{}, nil }
func (stubProvider) Lookup(context.Context, string) (Result, error)        { return Result{}, nil }
func (stubProvider) VerifyWebhook(http.Header, []byte) (Event, error)      { return Event{}, nil }
func (stubProvider) Refund(context.Context, RefundRequest) (RefundResult, error) {
	return RefundResult{}, nil
}
func (stubProvider) LookupRefund(context.Context, RefundLookup) (RefundResult, error) {
	return RefundResult{}, nil
}

func newTestRegistry() *Registry {
	r := NewRegistry()
	r.Register("paystack", []string{"secret_key"}, func(s Secrets) (Provider, error) { return stubProvider{s}, nil })
	r.Register("simulator", nil, func(s Secrets) (Provider, error) { return stubProvider{s}, nil })
	r.Register("broken", nil, func(Secrets) (Provider, error) { return nil, errors.New("boom") })
	return r
}

func TestRegistry(t *testing.T) {
	t.Parallel()
	r := newTestRegistry()
	tests := []struct {
		name     string
		provider string
		secrets  Secrets
		err      error
		contains string
	}{
		{"BuildsWithSecrets", "paystack", Secrets{"secret_key": "sk_test_1"}, nil, ""},
		{"SimulatorAcceptsEmptySecrets", "simulator", nil, nil, ""},
		{"MissingKeyIsBadSecrets", "paystack", Secrets{"other": "x"}, ErrBadSecrets, "secret_key"},
		{"BlankKeyIsBadSecrets", "paystack", Secrets{"secret_key": "  "}, ErrBadSecrets, "secret_key"},
		{"UnknownProvider", "nope", Secrets{}, ErrUnknownProvider, "nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := r.New(tt.provider, tt.secrets)
			verr := r.Validate(tt.provider, tt.secrets)
			if tt.err == nil {
				require.NoError(t, err)
				require.NoError(t, verr)
				require.NotNil(t, p)
				return
			}
			require.ErrorIs(t, err, tt.err)
			require.ErrorIs(t, verr, tt.err)
			require.Contains(t, err.Error(), tt.contains)
		})
	}
}

func TestRegistryErrorNeverHoldsSecretValues(t *testing.T) {
	t.Parallel()
	r := NewRegistry()
	r.Register("stripe", []string{"secret_key", "webhook_secret"}, func(s Secrets) (Provider, error) { return stubProvider{s}, nil })
	_, err := r.New("stripe", Secrets{"secret_key": "sk_live_SECRETVALUE"})
	require.ErrorIs(t, err, ErrBadSecrets)
	require.Contains(t, err.Error(), "webhook_secret")
	require.NotContains(t, err.Error(), "SECRETVALUE")
}

func TestRegistryConstructorErrorIsWrapped(t *testing.T) {
	t.Parallel()
	_, err := newTestRegistry().New("broken", nil)
	require.ErrorContains(t, err, "boom")
}

func TestRegistryNamesAndHas(t *testing.T) {
	t.Parallel()
	r := newTestRegistry()
	require.Equal(t, []string{"broken", "paystack", "simulator"}, r.Names())
	require.True(t, r.Has("paystack"))
	require.False(t, r.Has("flutterwave"))
}

func TestRegistryRegisterTwicePanics(t *testing.T) {
	t.Parallel()
	r := newTestRegistry()
	require.Panics(t, func() { r.Register("paystack", nil, func(Secrets) (Provider, error) { return nil, nil }) })
	require.Panics(t, func() { r.Register("x", nil, nil) })
}

// Validate, which the admin API runs on what it stores, refuses a secret
// name the adapter does not take (a typo would be stored and never used)
// without echoing it; New, which builds from what was stored, still
// builds from an account stored with one before.
func TestValidateRefusesUnknownSecretNames(t *testing.T) {
	t.Parallel()
	r := newTestRegistry()
	for _, tc := range []struct {
		provider string
		secrets  Secrets
		takes    string
	}{
		{"paystack", Secrets{"secret_key": "sk_test_1", "secretkey": "sk_live_TYPO"}, "it takes secret_key"},
		{"simulator", Secrets{"k": "v"}, "it takes none"},
	} {
		err := r.Validate(tc.provider, tc.secrets)
		require.ErrorIs(t, err, ErrBadSecrets, tc.provider)
		require.Contains(t, err.Error(), tc.takes)
		require.NotContains(t, err.Error(), "secretkey")
		require.NotContains(t, err.Error(), "TYPO")
		_, err = r.New(tc.provider, tc.secrets)
		require.NoError(t, err, tc.provider)
	}
}
