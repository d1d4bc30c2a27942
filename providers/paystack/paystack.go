// Package paystack is the Paystack adapter: it charges a saved card
// (authorization code) with our reference, looks charges up by that
// reference, refunds them with our refund reference as the refund's
// merchant_note (refund.go) and verifies x-paystack-signature webhooks.
//
// Paystack does not replay a repeated request: it rejects a reused reference
// with a 400 "Duplicate ..." answer. Charge therefore turns that answer into
// a verify of the reference, which is what makes a repeated Charge return the
// first charge's outcome (shared/providers.md 1.4).
package paystack

import (
	"context"
	"crypto/hmac"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/internal/wire"
)

// Name is the adapter's name in the registry and in provider accounts.
const Name = "paystack"

// DefaultBaseURL is Paystack's production API.
const DefaultBaseURL = "https://api.paystack.co"

// RequiredSecrets are the keys a tenant's Paystack account must hold. The
// secret key both authenticates API calls and signs webhooks.
var RequiredSecrets = []string{"secret_key"}

// Config is the deployment-wide part of the adapter (one per gateway, shared
// by all tenants).
type Config struct {
	BaseURL    string        // empty: DefaultBaseURL
	Timeout    time.Duration // per request; zero: 20s
	HTTPClient *http.Client  // optional; else one built with Timeout
}

// New returns the Constructor that binds a tenant's secrets. The HTTP client
// is built here, once, so all tenants share one connection pool.
func New(cfg Config) providers.Constructor {
	base := wire.BaseURL(cfg.BaseURL, DefaultBaseURL)
	client := wire.Client(cfg.Timeout, cfg.HTTPClient)
	return func(s providers.Secrets) (providers.Provider, error) {
		if missing := providers.MissingSecrets(s, RequiredSecrets); len(missing) > 0 {
			return nil, fmt.Errorf("%s: %w: missing %s", Name, providers.ErrBadSecrets, strings.Join(missing, ", "))
		}
		return &Provider{base: base, client: client, key: s["secret_key"]}, nil
	}
}

// Provider is one Paystack account.
type Provider struct {
	base   string
	client *http.Client
	key    string
}

var _ providers.Provider = (*Provider)(nil)

// envelope is every Paystack answer: status is whether the API call worked,
// not whether the payment did (that is data.status).
type envelope struct {
	Status  bool            `json:"status"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data"`
}

type transaction struct {
	ID              json.Number     `json:"id"`
	Status          string          `json:"status"`
	Reference       string          `json:"reference"`
	Amount          json.Number     `json:"amount"`
	RequestedAmount json.RawMessage `json:"requested_amount"` // read leniently: see asked
	Currency        string          `json:"currency"`
	GatewayResponse string          `json:"gateway_response"`
	Customer        struct {
		Email string `json:"email"`
	} `json:"customer"`
}

// asked is the amount the charge was asked for: requested_amount when
// Paystack gives one, since amount also holds the fees of a merchant that
// passes them on to its customers (requested_amount is amount less them).
// Only a whole number of kobo up to amount is taken: the field is not ours
// to trust blindly — anything else (absent, null, a fraction, a string that
// is no number, more than was collected) leaves amount, and the charge is
// never unreadable because of it.
func (tx transaction) asked() string {
	amount, err := strconv.ParseInt(tx.Amount.String(), 10, 64)
	if err != nil {
		return tx.Amount.String()
	}
	asked, err := strconv.ParseInt(strings.Trim(string(tx.RequestedAmount), `"`), 10, 64)
	if err != nil || asked <= 0 || asked > amount {
		return tx.Amount.String()
	}
	return strconv.FormatInt(asked, 10)
}

type chargeBody struct {
	Email             string `json:"email"`
	Amount            int64  `json:"amount"`
	AuthorizationCode string `json:"authorization_code"`
	Reference         string `json:"reference"`
	Currency          string `json:"currency"`
}

// DedupesCharges marks the adapter a providers.ChargeDeduper: Paystack
// refuses a reference it has seen ("Duplicate Transaction Reference",
// shared/providers.md 1.4), and Charge then looks the first one up.
func (p *Provider) DedupesCharges() {}

// Charge charges req.PaymentMethod (an AUTH_ code) with POST
// /transaction/charge_authorization. A "duplicate reference" answer means
// the first attempt reached Paystack: the charge is looked up and, if it is
// the same charge (amount and currency match), its outcome returned. If it
// is not ours the error wraps ErrUnknown and ErrReferenceConflict, so the key
// is never released on a charge that may exist.
func (p *Provider) Charge(ctx context.Context, req providers.ChargeRequest) (providers.Result, error) {
	body, err := json.Marshal(chargeBody{
		Email:             req.Email,
		Amount:            req.Amount,
		AuthorizationCode: req.PaymentMethod,
		Reference:         WireReference(req.Reference),
		Currency:          req.Currency,
	})
	if err != nil {
		return providers.Result{}, fmt.Errorf("%s: %w: %v", Name, providers.ErrNotCharged, err)
	}
	hreq, err := wire.NewJSONRequest(Name, http.MethodPost, p.base+"/transaction/charge_authorization", p.key, body)
	if err != nil {
		return providers.Result{}, err
	}
	resp, err := wire.Do(ctx, p.client, Name, hreq)
	if err != nil {
		return providers.Result{}, err
	}
	env, decodeErr := wire.DecodeJSON[envelope](resp.Body)
	switch {
	case resp.Status == http.StatusOK:
		if decodeErr != nil || !env.Status {
			return providers.Result{}, fmt.Errorf("%s: %w: unreadable charge answer (HTTP 200)", Name, providers.ErrUnknown)
		}
		tx, err := decodeTx(env.Data)
		if err != nil {
			return providers.Result{}, err
		}
		return result(tx), nil
	case resp.Status >= 400 && resp.Status < 500 && decodeErr == nil && isDuplicate(env.Message):
		// 400 for initialize; the status for charge_authorization is not
		// documented, and a duplicate read as any other 4xx would be "not
		// charged" — a charge that exists released. So any 4xx saying so.
		return p.lookupDuplicate(ctx, req)
	default:
		return providers.Result{}, wire.StatusError(Name, "charge", resp.Status, env.Message)
	}
}

// lookupDuplicate resolves a rejected repeat by verifying the reference.
func (p *Provider) lookupDuplicate(ctx context.Context, req providers.ChargeRequest) (providers.Result, error) {
	tx, found, err := p.verify(ctx, req.Reference)
	if err != nil {
		// The provider has just said the charge exists: whatever stops us
		// reading it (even a refused connection, which is "not charged"
		// elsewhere) leaves the outcome unknown, never "not charged".
		return providers.Result{}, fmt.Errorf("%s: %w: verifying a duplicate %s: %v", Name, providers.ErrUnknown, "reference", err)
	}
	if !found {
		// Paystack said the reference exists, then that it does not: we
		// cannot tell which is right.
		return providers.Result{}, fmt.Errorf("%s: %w: duplicate reference not found on verify", Name, providers.ErrUnknown)
	}
	if tx.asked() != fmt.Sprint(req.Amount) || !strings.EqualFold(tx.Currency, req.Currency) ||
		(tx.Customer.Email != "" && req.Email != "" && !strings.EqualFold(tx.Customer.Email, req.Email)) {
		return providers.Result{}, fmt.Errorf("%s: %w: %w: reference holds another amount, currency or customer",
			Name, providers.ErrUnknown, providers.ErrReferenceConflict)
	}
	return result(tx), nil
}

// Lookup verifies the reference with GET /transaction/verify/{reference}.
// Paystack answers an unknown reference with 404 (per its spec) or 400 (seen
// live), with a "not found" message: both are OutcomeNotFound.
func (p *Provider) Lookup(ctx context.Context, reference string) (providers.Result, error) {
	tx, found, err := p.verify(ctx, reference)
	if err != nil {
		return providers.Result{}, err
	}
	if !found {
		return providers.Result{Outcome: providers.OutcomeNotFound}, nil
	}
	return result(tx), nil
}

func (p *Provider) verify(ctx context.Context, reference string) (transaction, bool, error) {
	hreq, err := wire.NewJSONRequest(Name, http.MethodGet, p.base+"/transaction/verify/"+url.PathEscape(WireReference(reference)), p.key, nil)
	if err != nil {
		return transaction{}, false, err
	}
	resp, err := wire.Do(ctx, p.client, Name, hreq)
	if err != nil {
		return transaction{}, false, err
	}
	env, decodeErr := wire.DecodeJSON[envelope](resp.Body)
	switch {
	case resp.Status == http.StatusOK:
		if decodeErr != nil || !env.Status {
			return transaction{}, false, fmt.Errorf("%s: %w: unreadable verify answer (HTTP 200)", Name, providers.ErrUnknown)
		}
		tx, err := decodeTx(env.Data)
		if err == nil && tx.Reference != "" && tx.Reference != WireReference(reference) {
			// An answer about another transaction (a cache or proxy that
			// mixed up paths) must not settle this payment: the amount
			// check would pass for a charge of the same price.
			return transaction{}, false, fmt.Errorf("%s: %w: verify answered for another reference", Name, providers.ErrUnknown)
		}
		return tx, err == nil, err
	case (resp.Status == http.StatusNotFound || resp.Status == http.StatusBadRequest) &&
		decodeErr == nil && unknownReference(env.Message):
		return transaction{}, false, nil
	default:
		return transaction{}, false, wire.StatusError(Name, "verify", resp.Status, env.Message)
	}
}

func decodeTx(data json.RawMessage) (transaction, error) {
	tx, err := wire.DecodeJSON[transaction](data)
	if err != nil || tx.Status == "" {
		return transaction{}, fmt.Errorf("%s: %w: answer without a transaction status", Name, providers.ErrUnknown)
	}
	return tx, nil
}

// unknownReference matches verify's answers for a reference Paystack has
// no transaction under (shared/providers.md 1.3(d)): "Transaction reference
// not found" in practice, "Entity not found" in its spec. Any other "not
// found" — a proxy's or a wrong PAYSTACK_BASE_URL's "Not found" for a path
// it does not serve — says nothing about the charge, and read as "never
// charged" it would release payments that were.
func unknownReference(msg string) bool {
	m := strings.ToLower(strings.TrimSpace(msg))
	return strings.Contains(m, "reference not found") || m == "entity not found"
}

// isDuplicate matches Paystack's "Duplicate Transaction Reference" and
// "Duplicate charge request for reference" case-insensitively, because the
// exact text for charge_authorization is not documented.
func isDuplicate(msg string) bool { return strings.Contains(strings.ToLower(msg), "duplicate") }

// result maps data.status (shared/providers.md 1.5). Anything we do not know
// is pending: it is not final, so the sweeper keeps asking and a person
// reviews it after REVIEW_AFTER rather than us guessing.
func result(tx transaction) providers.Result {
	id := tx.ID.String()
	var r providers.Result
	switch strings.ToLower(tx.Status) {
	case "success":
		r = providers.Result{Outcome: providers.OutcomeSucceeded, TransactionID: id}
	case "failed":
		r = wire.Declined(id, wire.DeclineCode(tx.GatewayResponse))
	case "reversed":
		// Charged, then refunded or charged back (providers.md 1.3): never
		// a decline.
		r = providers.Result{Outcome: providers.OutcomePending, TransactionID: id, Reversed: true}
	default: // pending, ongoing, processing, queued, send_*, open_url, pay_offline, abandoned
		r = providers.Result{Outcome: providers.OutcomePending, TransactionID: id}
	}
	// Kobo (minor units) already; an amount that is not an integer stays
	// 0, which no payment has.
	r.Amount, _ = strconv.ParseInt(tx.asked(), 10, 64)
	r.Currency = strings.ToUpper(tx.Currency)
	return r
}

// VerifyWebhook checks x-paystack-signature, the hex HMAC-SHA512 of the raw
// body keyed with the secret key, in constant time, then reads the event.
// charge.* events carry the charge's Reference; refund.* events
// (refund.pending, refund.processing, refund.processed, refund.failed,
// refund.needs-attention) are Refund events naming the refunded charge by
// its transaction_reference (Paystack's refund events carry no merchant
// note, so RefundReference is empty unless one is there). Others verify but
// return an empty Reference, meaning "acknowledge and ignore".
func (p *Provider) VerifyWebhook(header http.Header, body []byte) (providers.Event, error) {
	return VerifyWebhook(p.key, header, body)
}

// VerifyWebhook is Provider.VerifyWebhook without a Provider, for tests and
// tools that only hold the secret key.
func VerifyWebhook(secretKey string, header http.Header, body []byte) (providers.Event, error) {
	got, err := hex.DecodeString(strings.TrimSpace(header.Get("X-Paystack-Signature")))
	if err != nil || len(got) != sha512.Size {
		return providers.Event{}, fmt.Errorf("%s: %w", Name, providers.ErrBadSignature)
	}
	if !hmac.Equal(got, Sign(secretKey, body)) {
		return providers.Event{}, fmt.Errorf("%s: %w", Name, providers.ErrBadSignature)
	}
	var ev struct {
		Event string `json:"event"`
		Data  struct {
			Reference            string `json:"reference"`
			TransactionReference string `json:"transaction_reference"`
			MerchantNote         string `json:"merchant_note"`
			// An object with the reference in some payloads, an id in
			// others: read only when it is the former.
			Transaction json.RawMessage `json:"transaction"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &ev); err != nil || ev.Event == "" {
		return providers.Event{}, fmt.Errorf("%s: %w", Name, providers.ErrBadPayload)
	}
	out := providers.Event{Type: ev.Event}
	switch {
	case ev.Event == "charge.success":
		if ev.Data.Reference == "" {
			return providers.Event{}, fmt.Errorf("%s: %w: %s without reference", Name, providers.ErrBadPayload, ev.Event)
		}
		out.Reference = OurReference(ev.Data.Reference)
	case strings.HasPrefix(ev.Event, "charge.") && ev.Data.Reference != "":
		// Another event about a charge that names it (charge.failed, as
		// some integrations see): looked up, like any.
		out.Reference = OurReference(ev.Data.Reference)
	}
	// Other charge.* events — charge.dispute.create|remind|resolve carry a
	// dispute, its transaction nested — are acknowledged and ignored: a
	// dispute changes no payment here, and refusing it would have Paystack
	// redeliver it for 72 hours.
	if strings.HasPrefix(ev.Event, "refund.") {
		ref := ev.Data.TransactionReference
		var tx struct {
			Reference string `json:"reference"`
		}
		if ref == "" && json.Unmarshal(ev.Data.Transaction, &tx) == nil {
			ref = tx.Reference
		}
		if ref == "" {
			return providers.Event{}, fmt.Errorf("%s: %w: %s without transaction_reference", Name, providers.ErrBadPayload, ev.Event)
		}
		out.Reference, out.Refund, out.RefundReference = OurReference(ref), true, ev.Data.MerchantNote
	}
	return out, nil
}

// Sign returns the raw HMAC-SHA512 of body under the secret key, the value
// x-paystack-signature carries hex-encoded. The fake uses it to sign the
// webhooks it emits.
func Sign(secretKey string, body []byte) []byte {
	m := hmac.New(sha512.New, []byte(secretKey))
	m.Write(body)
	return m.Sum(nil)
}

// Paystack allows only alphanumerics, '-', '.' and '=' in a reference, and
// rejects anything else with "Invalid character in transaction reference".
// providers.Reference already stays inside that set (so for the gateway's
// own references this is the identity), but the adapter does not trust
// every caller's charset and encodes references on the wire: '=' is
// the escape, and any other byte outside the set (including '=' itself)
// becomes "=XX" (upper-case hex). The mapping is deterministic (every retry
// sends the same wire reference, so Paystack still dedupes), injective (two
// of our references never share a wire reference) and the identity on
// references already in the charset without '='.
const refHex = "0123456789ABCDEF"

func refSafe(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.'
}

// WireReference is the reference Paystack sees for our reference ref.
func WireReference(ref string) string {
	var b strings.Builder
	for i := 0; i < len(ref); i++ {
		c := ref[i]
		if refSafe(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('=')
		b.WriteByte(refHex[c>>4])
		b.WriteByte(refHex[c&0xF])
	}
	return b.String()
}

// OurReference reverses WireReference. A reference that is not a valid
// encoding (not made by us) is returned unchanged: the gateway finds no
// payment for it and ignores it.
func OurReference(wire string) string {
	if !strings.Contains(wire, "=") {
		return wire
	}
	var b strings.Builder
	for i := 0; i < len(wire); i++ {
		c := wire[i]
		if c != '=' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(wire) {
			return wire
		}
		hi, lo := strings.IndexByte(refHex, wire[i+1]), strings.IndexByte(refHex, wire[i+2])
		if hi < 0 || lo < 0 {
			return wire
		}
		b.WriteByte(byte(hi<<4 | lo))
		i += 2
	}
	return b.String()
}
