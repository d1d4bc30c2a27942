// Package stripe is the Stripe adapter: it creates and confirms an
// off-session PaymentIntent with our reference as the Idempotency-Key and in
// metadata, looks it up by that metadata, refunds it with our refund
// reference as the Idempotency-Key and in the refund's metadata (refund.go)
// and verifies Stripe-Signature webhooks.
//
// Unlike Paystack, Stripe replays: a repeated create with the same
// Idempotency-Key and identical parameters returns the first answer (for at
// least 24h), so a repeated Charge simply sends the identical request again.
// The form is encoded from sorted keys, so the bytes are identical too.
package stripe

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
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
const Name = "stripe"

// DefaultBaseURL is Stripe's API.
const DefaultBaseURL = "https://api.stripe.com"

// MetadataKey is the PaymentIntent metadata key that carries our reference.
const MetadataKey = "oncepay_reference"

// DefaultTolerance is how old a webhook's timestamp may be (stripe-go's
// default), so a captured delivery cannot be replayed later.
const DefaultTolerance = 5 * time.Minute

// lookupWindow is how far back Lookup lists PaymentIntents before falling
// back to search. It covers the sweeper's whole life of a key (stale after
// 5m, review after 24h) with margin; listPages bounds the work per lookup.
const (
	lookupWindow = 48 * time.Hour
	listPages    = 5
)

// RequiredSecrets are the keys a tenant's Stripe account must hold: the API
// secret key and the webhook endpoint's signing secret (whsec_...).
var RequiredSecrets = []string{"secret_key", "webhook_secret"}

// Config is the deployment-wide part of the adapter (one per gateway, shared
// by all tenants).
type Config struct {
	BaseURL    string        // empty: DefaultBaseURL
	Timeout    time.Duration // per request; zero: 20s
	HTTPClient *http.Client  // optional; else one built with Timeout
	// Now is the clock for webhook timestamp tolerance and the lookup
	// window; nil means time.Now. Tests inject a fixed clock.
	Now func() time.Time
}

// New returns the Constructor that binds a tenant's secrets, sharing one
// HTTP client between all tenants.
func New(cfg Config) providers.Constructor {
	base := wire.BaseURL(cfg.BaseURL, DefaultBaseURL)
	client := wire.Client(cfg.Timeout, cfg.HTTPClient)
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return func(s providers.Secrets) (providers.Provider, error) {
		if missing := providers.MissingSecrets(s, RequiredSecrets); len(missing) > 0 {
			return nil, fmt.Errorf("%s: %w: missing %s", Name, providers.ErrBadSecrets, strings.Join(missing, ", "))
		}
		return &Provider{base: base, client: client, now: now, key: s["secret_key"], whsec: s["webhook_secret"]}, nil
	}
}

// Provider is one Stripe account.
type Provider struct {
	base   string
	client *http.Client
	now    func() time.Time
	key    string
	whsec  string
}

var (
	_ providers.Provider      = (*Provider)(nil)
	_ providers.RefundDeduper = (*Provider)(nil)
)

type paymentIntent struct {
	ID               string            `json:"id"`
	Object           string            `json:"object"`
	Status           string            `json:"status"`
	Amount           int64             `json:"amount"`
	Currency         string            `json:"currency"`
	Metadata         map[string]string `json:"metadata"`
	LastPaymentError *stripeError      `json:"last_payment_error"`
}

type stripeError struct {
	Type          string         `json:"type"`
	Code          string         `json:"code"`
	DeclineCode   string         `json:"decline_code"`
	Message       string         `json:"message"`
	PaymentIntent *paymentIntent `json:"payment_intent"`
}

type errorEnvelope struct {
	Error *stripeError `json:"error"`
}

type list struct {
	Data    []paymentIntent `json:"data"`
	HasMore bool            `json:"has_more"`
}

// ChargeForm is the exact form Charge sends, exported so the fake and tests
// can compare against it. Its amount is in Stripe's units (APIAmount); one
// Stripe cannot take is an error wrapping ErrNotCharged and ErrAmount.
func ChargeForm(req providers.ChargeRequest) (url.Values, error) {
	amount, err := APIAmount(req.Amount, req.Currency)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", Name, providers.ErrNotCharged, err)
	}
	f := url.Values{
		"amount":                             {strconv.FormatInt(amount, 10)},
		"currency":                           {strings.ToLower(req.Currency)},
		"payment_method":                     {req.PaymentMethod},
		"confirm":                            {"true"},
		"off_session":                        {"true"},
		"automatic_payment_methods[enabled]": {"true"},
		"automatic_payment_methods[allow_redirects]": {"never"},
		"metadata[" + MetadataKey + "]":              {req.Reference},
	}
	if req.Email != "" {
		f.Set("receipt_email", req.Email)
	}
	if req.Description != "" {
		f.Set("description", req.Description)
	}
	return f, nil
}

// Charge creates and confirms the PaymentIntent with POST
// /v1/payment_intents and Idempotency-Key = reference. A decline is Stripe's
// 402 card_error, returned as OutcomeFailed. A 409 (the first request with
// this key is still running) and a 400 idempotency_error (the key was first
// used with other parameters, so a charge may exist) are ErrUnknown: neither
// may release the key. An unknown currency, or an amount Stripe cannot
// take (APIAmount), is refused before anything is sent: ErrNotCharged.
func (p *Provider) Charge(ctx context.Context, req providers.ChargeRequest) (providers.Result, error) {
	if _, ok := providers.Exponent(req.Currency); !ok {
		return providers.Result{}, fmt.Errorf("%s: %w: %w", Name, providers.ErrNotCharged, providers.ErrCurrency)
	}
	form, err := ChargeForm(req)
	if err != nil {
		return providers.Result{}, err
	}
	hreq, err := p.request(http.MethodPost, p.base+"/v1/payment_intents", []byte(form.Encode()))
	if err != nil {
		return providers.Result{}, err
	}
	hreq.Header.Set("Idempotency-Key", req.Reference)
	// net/http silently re-sends a request carrying Idempotency-Key when a
	// reused connection breaks. That would hide a lost answer from the
	// caller (and is a retry loop we do not own), so make the body
	// non-replayable: a cut connection surfaces as ErrUnknown, and the
	// gateway's own retry re-sends with the same key.
	hreq.GetBody = nil
	resp, err := wire.Do(ctx, p.client, Name, hreq)
	if err != nil {
		return providers.Result{}, err
	}
	if resp.Status == http.StatusOK {
		var pi paymentIntent
		if err := json.Unmarshal(resp.Body, &pi); err != nil || pi.Status == "" {
			return providers.Result{}, fmt.Errorf("%s: %w: unreadable charge answer (HTTP 200)", Name, providers.ErrUnknown)
		}
		return result(pi), nil
	}
	var env errorEnvelope
	_ = json.Unmarshal(resp.Body, &env)
	e := env.Error
	if e == nil {
		e = &stripeError{}
	}
	switch {
	case resp.Status == http.StatusPaymentRequired && e.Type == "card_error":
		id := ""
		if e.PaymentIntent != nil {
			id = e.PaymentIntent.ID
		}
		return wire.Declined(id, failureCode(e)), nil
	case e.Type == "idempotency_error":
		return providers.Result{}, fmt.Errorf("%s: charge: %w: HTTP %d: idempotency key reused with other parameters", Name, providers.ErrUnknown, resp.Status)
	case resp.Status == http.StatusPaymentRequired:
		// 402 without a card error: the request was valid and may have
		// created an intent.
		return providers.Result{}, fmt.Errorf("%s: charge: %w: HTTP 402: %s", Name, providers.ErrUnknown, wire.Message(e.Message))
	default:
		return providers.Result{}, statusError("charge", resp.Status, e)
	}
}

func failureCode(e *stripeError) string {
	switch {
	case e == nil:
		return "card_declined"
	case e.DeclineCode != "":
		return e.DeclineCode
	case e.Code != "":
		return e.Code
	default:
		return "card_declined"
	}
}

// Lookup finds the PaymentIntent carrying our reference without creating
// anything. First it lists recent intents (the list API is consistent, search
// is not) and filters on metadata; then it asks search, for older ones.
//
// Nothing found is OutcomePending, not OutcomeNotFound: Stripe search lags
// by up to an hour, so an empty answer is not proof. The sweeper then keeps
// the key in progress, and after REVIEW_AFTER it becomes requires_review for
// a person. (The reliable "find or create" is a repeated Charge with the same
// Idempotency-Key, which a retry of the request does.)
func (p *Provider) Lookup(ctx context.Context, reference string) (providers.Result, error) {
	pi, found, err := p.findIntent(ctx, reference)
	if err != nil {
		return providers.Result{}, err
	}
	if !found {
		return providers.Result{Outcome: providers.OutcomePending}, nil
	}
	return result(pi), nil
}

// findIntent finds the PaymentIntent carrying our reference, as Lookup
// describes: the recent list, then search. Not found is not proof.
func (p *Provider) findIntent(ctx context.Context, reference string) (paymentIntent, bool, error) {
	q := url.Values{"limit": {"100"}, "created[gte]": {strconv.FormatInt(p.now().Add(-lookupWindow).Unix(), 10)}}
	for range listPages {
		var l list
		if err := p.get(ctx, "/v1/payment_intents?"+q.Encode(), &l); err != nil {
			return paymentIntent{}, false, err
		}
		for _, pi := range l.Data {
			if pi.Metadata[MetadataKey] == reference {
				return pi, true, nil
			}
		}
		if !l.HasMore || len(l.Data) == 0 {
			break
		}
		q.Set("starting_after", l.Data[len(l.Data)-1].ID)
	}
	var found list
	sq := url.Values{"query": {"metadata['" + MetadataKey + "']:'" + strings.ReplaceAll(reference, "'", `\'`) + "'"}}
	if err := p.get(ctx, "/v1/payment_intents/search?"+sq.Encode(), &found); err != nil {
		return paymentIntent{}, false, err
	}
	for _, pi := range found.Data {
		if pi.Metadata[MetadataKey] == reference {
			return pi, true, nil
		}
	}
	return paymentIntent{}, false, nil
}

func (p *Provider) get(ctx context.Context, path string, into any) error {
	hreq, err := p.request(http.MethodGet, p.base+path, nil)
	if err != nil {
		return err
	}
	resp, err := wire.Do(ctx, p.client, Name, hreq)
	if err != nil {
		return err
	}
	if resp.Status != http.StatusOK {
		var env errorEnvelope
		_ = json.Unmarshal(resp.Body, &env)
		err := statusError("lookup", resp.Status, env.Error)
		if resp.Status == http.StatusNotFound && env.Error != nil && env.Error.Code == "resource_missing" {
			return &missingError{err}
		}
		return err
	}
	if err := json.Unmarshal(resp.Body, into); err != nil {
		return fmt.Errorf("%s: %w: unreadable lookup answer (HTTP 200)", Name, providers.ErrUnknown)
	}
	return nil
}

// missingError is Stripe's 404 resource_missing for the object a GET names
// (classified like any 4xx; LookupRefund tells it apart).
type missingError struct{ err error }

func (e *missingError) Error() string { return e.err.Error() }
func (e *missingError) Unwrap() error { return e.err }

// request is a Stripe API request: Bearer secret key, and a body (nil for
// none) form-encoded.
func (p *Provider) request(method, u string, body []byte) (*http.Request, error) {
	return wire.NewRequest(Name, method, u, p.key, "application/x-www-form-urlencoded", body)
}

func statusError(op string, status int, e *stripeError) error {
	msg := ""
	if e != nil {
		msg = e.Type + ": " + e.Message
	}
	return wire.StatusError(Name, op, status, msg)
}

// result maps a PaymentIntent status (shared/providers.md 3.5).
// requires_payment_method is a failed confirm only with the attempt's
// last_payment_error: without one the intent was never confirmed (Charge
// confirms as it creates, so an intent made by a request whose answer was
// lost in between), and calling that a card decline would give the
// merchant a reason that never happened and end the payment for good. It
// stays pending, and the sweeper takes it to review if it never moves.
func result(pi paymentIntent) providers.Result {
	var r providers.Result
	switch {
	case pi.Status == "succeeded":
		r = providers.Result{Outcome: providers.OutcomeSucceeded, TransactionID: pi.ID}
	case pi.Status == "requires_payment_method" && pi.LastPaymentError != nil:
		r = wire.Declined(pi.ID, failureCode(pi.LastPaymentError))
	case pi.Status == "canceled":
		r = wire.Declined(pi.ID, "payment_canceled")
	default: // processing, requires_action, requires_confirmation, requires_capture, unconfirmed, unknown
		r = providers.Result{Outcome: providers.OutcomePending, TransactionID: pi.ID}
	}
	// Stripe's currencies are lower case, its amounts in its own units: the
	// gateway compares both with the payment's before it settles it. An
	// amount no ISO amount converts to cannot be a charge we sent: it stays
	// zero, which matches no payment.
	r.Currency = strings.ToUpper(pi.Currency)
	if amount, err := ISOAmount(pi.Amount, r.Currency); err == nil {
		r.Amount = amount
	}
	return r
}

// VerifyWebhook checks Stripe-Signature with the webhook secret and the
// adapter's clock, then reads the event (ParseEvent). payment_intent.*
// events carry our reference from data.object.metadata, refund events are
// Refund events; others (and intents not made by OncePay) verify with an
// empty Reference: acknowledge and ignore.
func (p *Provider) VerifyWebhook(header http.Header, body []byte) (providers.Event, error) {
	if err := VerifySignature(header.Get("Stripe-Signature"), body, p.whsec, p.now(), DefaultTolerance); err != nil {
		return providers.Event{}, err
	}
	return ParseEvent(body)
}

// VerifySignature checks a Stripe-Signature header value
// ("t=<unix>,v1=<hex>[,v1=<hex>...]") as stripe-go does: any v1 equal (in
// constant time) to hex HMAC-SHA256("{t}.{body}") keyed with the whole secret
// string, and t no further than tolerance from now (either way: a timestamp
// from the future is as suspicious as a stale one). Errors wrap
// ErrBadSignature.
func VerifySignature(header string, body []byte, secret string, now time.Time, tolerance time.Duration) error {
	bad := func(why string) error { return fmt.Errorf("%s: %w: %s", Name, providers.ErrBadSignature, why) }
	if secret == "" {
		return bad("no secret")
	}
	var ts string
	var sigs [][]byte
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			if b, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return bad("malformed header")
	}
	want := Sign(secret, t, body)
	ok := false
	for _, s := range sigs {
		if hmac.Equal(s, want) {
			ok = true
		}
	}
	if !ok {
		return bad("no matching v1 signature")
	}
	age := now.Sub(time.Unix(t, 0))
	if age > tolerance || age < -tolerance {
		return bad("timestamp outside tolerance")
	}
	return nil
}

// Sign returns the raw v1 signature of body at unix time t.
func Sign(secret string, t int64, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(strconv.FormatInt(t, 10)))
	m.Write([]byte("."))
	m.Write(body)
	return m.Sum(nil)
}

// SignatureHeader builds a Stripe-Signature value for body at time t, as
// Stripe sends it; the fake and tests use it.
func SignatureHeader(secret string, t time.Time, body []byte) string {
	return fmt.Sprintf("t=%d,v1=%s", t.Unix(), hex.EncodeToString(Sign(secret, t.Unix(), body)))
}

// ParseEvent reads a verified event body. Errors wrap ErrBadPayload.
//
// payment_intent.* events name our charge by the intent's metadata. Refund
// events are charge.refunded (data.object a Charge: the PaymentIntent's id
// as TransactionID, and our charge reference only if the Charge carries
// it in metadata) and refund.* / charge.refund.updated (data.object a
// Refund: our refund reference and charge reference from the refund's
// metadata, which Refund sets, and the PaymentIntent's id).
func ParseEvent(body []byte) (providers.Event, error) {
	var ev struct {
		Type string `json:"type"`
		Data struct {
			Object struct {
				Object   string            `json:"object"`
				Metadata map[string]string `json:"metadata"`
				// An id, or the expanded object: read leniently so that
				// it never makes an event unreadable.
				PaymentIntent json.RawMessage `json:"payment_intent"`
			} `json:"object"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &ev); err != nil || ev.Type == "" {
		return providers.Event{}, fmt.Errorf("%s: %w", Name, providers.ErrBadPayload)
	}
	out := providers.Event{Type: ev.Type}
	obj := ev.Data.Object
	switch {
	case strings.HasPrefix(ev.Type, "payment_intent."):
		out.Reference = obj.Metadata[MetadataKey]
	case ev.Type == "charge.refunded" || ev.Type == "charge.refund.updated" || strings.HasPrefix(ev.Type, "refund."):
		out.Refund, out.TransactionID = true, objectID(obj.PaymentIntent)
		if obj.Object == "refund" {
			out.RefundReference, out.Reference = obj.Metadata[MetadataKey], obj.Metadata[RefundMetadataChargeKey]
		} else {
			out.Reference = obj.Metadata[MetadataKey]
		}
	}
	return out, nil
}

// objectID reads a field Stripe gives as an id or, expanded, as an object
// with one; "" for anything else.
func objectID(raw json.RawMessage) string {
	var id string
	if json.Unmarshal(raw, &id) == nil {
		return id
	}
	var obj struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(raw, &obj) == nil {
		return obj.ID
	}
	return ""
}
