package flutterwave

import (
	"context"
	"fmt"

	"github.com/oncepay/gateway/providers"
)

// Refund implements providers.Provider. Not wired to the API yet: it
// refuses before sending anything.
func (p *Provider) Refund(context.Context, providers.RefundRequest) (providers.RefundResult, error) {
	return providers.RefundResult{}, fmt.Errorf("flutterwave: %w: refunds are not implemented yet", providers.ErrNotCharged)
}

// LookupRefund implements providers.Provider.
func (p *Provider) LookupRefund(context.Context, providers.RefundLookup) (providers.RefundResult, error) {
	return providers.RefundResult{}, fmt.Errorf("flutterwave: %w: refunds are not implemented yet", providers.ErrNotCharged)
}
