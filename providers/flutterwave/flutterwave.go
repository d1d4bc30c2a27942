// Package flutterwave is the Flutterwave v3 adapter: it charges a saved card
// token with our reference as tx_ref, looks charges up by tx_ref, refunds
// them by their transaction id with our refund reference as the refund's
// comments (refund.go) and verifies webhooks (verif-hash, and
// flutterwave-signature when sent).
//
// Like Paystack, Flutterwave v3 does not replay a repeated request; a reused
// tx_ref is rejected, and Charge turns that rejection into a lookup
// (shared/providers.md 2.4). Amounts go out in major units, as an exact
// decimal (providers.FormatMajor) written as a JSON number, never a float.
package flutterwave

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/internal/wire"
)

// Name is the adapter's name in the registry and in provider accounts.
const Name = "flutterwave"

// DefaultBaseURL is Flutterwave's production API (paths add /v3/...).
const DefaultBaseURL = "https://api.flutterwave.com"

// RequiredSecrets are the keys a tenant's Flutterwave account must hold: the
// API secret key, and the dashboard "secret hash" that authenticates
// webhooks.
var RequiredSecrets = []string{"secret_key", "secret_hash"}

// Config is the deployment-wide part of the adapter (one per gateway, shared
// by all tenants).
type Config struct {
	BaseURL    string        // empty: DefaultBaseURL
	Timeout    time.Duration // per request; zero: 20s
	HTTPClient *http.Client  // optional; else one built with Timeout
}

// New returns the Constructor that binds a tenant's secrets, sharing one
// HTTP client between all tenants.
func New(cfg Config) providers.Constructor {
	base := wire.BaseURL(cfg.BaseURL, DefaultBaseURL)
	client := wire.Client(cfg.Timeout, cfg.HTTPClient)
	return func(s providers.Secrets) (providers.Provider, error) {
		if missing := providers.MissingSecrets(s, RequiredSecrets); len(missing) > 0 {
			return nil, fmt.Errorf("%s: %w: missing %s", Name, providers.ErrBadSecrets, strings.Join(missing, ", "))
		}
		return &Provider{base: base, client: client, key: s["secret_key"], hash: s["secret_hash"]}, nil
	}
}

// Provider is one Flutterwave account.
type Provider struct {
	base   string
	client *http.Client
	key    string
	hash   string
}

var _ providers.Provider = (*Provider)(nil)

// envelope: status is "success" or "error"; data is the transaction.
type envelope struct {
	Status  string          `json:"status"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data"`
}

type transaction struct {
	ID                json.Number `json:"id"`
	TxRef             string      `json:"tx_ref"`
	Amount            json.Number `json:"amount"`
	Currency          string      `json:"currency"`
	Status            string      `json:"status"`
	ProcessorResponse string      `json:"processor_response"`
}

type chargeBody struct {
	Token     string      `json:"token"`
	Currency  string      `json:"currency"`
	Amount    json.Number `json:"amount"`
	Email     string      `json:"email"`
	TxRef     string      `json:"tx_ref"`
	Narration string      `json:"narration"`
}

// Charge charges the token with POST /v3/tokenized-charges. A duplicate
// tx_ref answer is looked up; a charge under our tx_ref with another amount
// or currency wraps ErrUnknown and ErrReferenceConflict, so the key is never
// released on a charge that may exist.
func (p *Provider) Charge(ctx context.Context, req providers.ChargeRequest) (providers.Result, error) {
	major, err := providers.FormatMajor(req.Amount, req.Currency)
	if err != nil {
		return providers.Result{}, fmt.Errorf("%s: %w: %w", Name, providers.ErrNotCharged, err)
	}
	narration := req.Description
	if narration == "" {
		// The official SDK requires a narration.
		narration = "Payment " + req.Reference
	}
	body, err := json.Marshal(chargeBody{
		Token: req.PaymentMethod, Currency: req.Currency, Amount: json.Number(major),
		Email: req.Email, TxRef: req.Reference, Narration: narration,
	})
	if err != nil {
		return providers.Result{}, fmt.Errorf("%s: %w: %v", Name, providers.ErrNotCharged, err)
	}
	hreq, err := wire.NewJSONRequest(Name, http.MethodPost, p.base+"/v3/tokenized-charges", p.key, body)
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
		if decodeErr != nil || env.Status != "success" {
			return providers.Result{}, fmt.Errorf("%s: %w: unreadable charge answer (HTTP 200)", Name, providers.ErrUnknown)
		}
		tx, err := decodeTx(env.Data)
		if err != nil {
			return providers.Result{}, err
		}
		return result(tx), nil
	case resp.Status >= 400 && resp.Status < 500 && decodeErr == nil &&
		strings.Contains(strings.ToLower(env.Message), "duplicate"):
		return p.lookupDuplicate(ctx, req, major)
	default:
		return providers.Result{}, wire.StatusError(Name, "charge", resp.Status, env.Message)
	}
}

func (p *Provider) lookupDuplicate(ctx context.Context, req providers.ChargeRequest, major string) (providers.Result, error) {
	tx, found, err := p.verify(ctx, req.Reference)
	if err != nil {
		// The provider has just said the charge exists: whatever stops us
		// reading it (even a refused connection, which is "not charged"
		// elsewhere) leaves the outcome unknown, never "not charged".
		return providers.Result{}, fmt.Errorf("%s: %w: verifying a duplicate %s: %v", Name, providers.ErrUnknown, "tx_ref", err)
	}
	if !found {
		return providers.Result{}, fmt.Errorf("%s: %w: duplicate tx_ref not found on verify", Name, providers.ErrUnknown)
	}
	if !sameAmount(tx.Amount, major) || !strings.EqualFold(tx.Currency, req.Currency) {
		return providers.Result{}, fmt.Errorf("%s: %w: %w: tx_ref holds another amount or currency",
			Name, providers.ErrUnknown, providers.ErrReferenceConflict)
	}
	return result(tx), nil
}

// sameAmount compares decimals exactly ("50" equals "50.00").
func sameAmount(got json.Number, want string) bool {
	a, ok1 := new(big.Rat).SetString(got.String())
	b, ok2 := new(big.Rat).SetString(want)
	return ok1 && ok2 && a.Cmp(b) == 0
}

// Lookup reads GET /v3/transactions/verify_by_reference?tx_ref=. An error
// envelope saying "No transaction was found" is OutcomeNotFound whatever its
// 4xx status (the code is not documented).
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
	u := p.base + "/v3/transactions/verify_by_reference?" + url.Values{"tx_ref": {reference}}.Encode()
	hreq, err := wire.NewJSONRequest(Name, http.MethodGet, u, p.key, nil)
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
		if decodeErr != nil || env.Status != "success" {
			return transaction{}, false, fmt.Errorf("%s: %w: unreadable verify answer (HTTP 200)", Name, providers.ErrUnknown)
		}
		tx, err := decodeTx(env.Data)
		if err == nil && tx.TxRef != "" && tx.TxRef != reference {
			// Flutterwave's own guidance: check the tx_ref matches.
			return transaction{}, false, fmt.Errorf("%s: %w: verify answered for another tx_ref", Name, providers.ErrUnknown)
		}
		return tx, err == nil, err
	case resp.Status >= 400 && resp.Status < 500 && decodeErr == nil && env.Status == "error" &&
		strings.Contains(strings.ToLower(env.Message), "no transaction was found"):
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

// result maps data.status (shared/providers.md 2.5); anything else is
// pending, so the sweeper keeps asking rather than us guessing.
func result(tx transaction) providers.Result {
	id := tx.ID.String()
	var r providers.Result
	switch strings.ToLower(tx.Status) {
	case "successful":
		r = providers.Result{Outcome: providers.OutcomeSucceeded, TransactionID: id}
	case "failed":
		r = wire.Declined(id, wire.DeclineCode(tx.ProcessorResponse))
	default:
		r = providers.Result{Outcome: providers.OutcomePending, TransactionID: id}
	}
	// Major units on the wire; one that is not a whole number of the
	// currency's minor units stays 0, which no payment has.
	r.Currency = strings.ToUpper(tx.Currency)
	r.Amount, _ = providers.ParseMajor(tx.Amount.String(), r.Currency)
	return r
}

// VerifyWebhook authenticates a delivery with the tenant's secret hash.
// Flutterwave has two schemes: the classic verif-hash header (the secret
// hash itself) and the newer flutterwave-signature (base64 HMAC-SHA256 of
// the raw body keyed with the secret hash). At least one must be present and
// every one present must verify, compared in constant time. verif-hash does
// not cover the body, which is acceptable because the gateway re-checks the
// outcome with Lookup and trusts only the reference.
func (p *Provider) VerifyWebhook(header http.Header, body []byte) (providers.Event, error) {
	return VerifyWebhook(p.hash, header, body)
}

// VerifyWebhook is Provider.VerifyWebhook without a Provider.
func VerifyWebhook(secretHash string, header http.Header, body []byte) (providers.Event, error) {
	bad := fmt.Errorf("%s: %w", Name, providers.ErrBadSignature)
	verif, hasVerif := header.Get("Verif-Hash"), len(header.Values("Verif-Hash")) > 0
	sig, hasSig := header.Get("Flutterwave-Signature"), len(header.Values("Flutterwave-Signature")) > 0
	if secretHash == "" || (!hasVerif && !hasSig) {
		return providers.Event{}, bad
	}
	if hasVerif && subtle.ConstantTimeCompare([]byte(verif), []byte(secretHash)) != 1 {
		return providers.Event{}, bad
	}
	if hasSig {
		got, err := base64.StdEncoding.DecodeString(strings.TrimSpace(sig))
		if err != nil || !hmac.Equal(got, Sign(secretHash, body)) {
			return providers.Event{}, bad
		}
	}
	return ParseEvent(body)
}

// ParseEvent reads a verified body. It takes both shapes Flutterwave sends:
// the v3 envelope {"event":"charge.completed","data":{"tx_ref":...}} and the
// flat legacy one {"txRef":...,"event.type":"CARD_TRANSACTION"}.
//
// A refund event (an event or event.type naming a refund: refund.completed
// and the like; Flutterwave's refund events are UNCONFIRMED by name and
// shape) is a Refund event: it names the charge by tx_ref when the payload
// has it and by its transaction id (tx_id, transaction_id) as
// TransactionID, and carries our refund reference as RefundReference when
// it echoes the refund's comment(s).
func ParseEvent(body []byte) (providers.Event, error) {
	var ev struct {
		Event     string `json:"event"`
		EventType string `json:"event.type"`
		TxRef     string `json:"txRef"`
		Data      *struct {
			TxRef string `json:"tx_ref"`
			// Read leniently (a number or a string; anything else is
			// ignored), so that these refund fields never make a charge
			// event unreadable.
			TxID          json.RawMessage `json:"tx_id"`
			TransactionID json.RawMessage `json:"transaction_id"`
			Comments      json.RawMessage `json:"comments"`
			Comment       json.RawMessage `json:"comment"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &ev); err != nil {
		return providers.Event{}, fmt.Errorf("%s: %w", Name, providers.ErrBadPayload)
	}
	out := providers.Event{Type: ev.Event}
	if out.Type == "" {
		out.Type = ev.EventType
	}
	switch {
	case ev.Data != nil && ev.Data.TxRef != "":
		out.Reference = ev.Data.TxRef
	case ev.TxRef != "":
		out.Reference = ev.TxRef
	}
	if out.Type == "" && out.Reference == "" {
		return providers.Event{}, fmt.Errorf("%s: %w: no event", Name, providers.ErrBadPayload)
	}
	if strings.Contains(strings.ToLower(ev.Event), "refund") || strings.Contains(strings.ToLower(ev.EventType), "refund") {
		out.Refund = true
		if ev.Data != nil {
			out.TransactionID = idString(ev.Data.TxID)
			if out.TransactionID == "" {
				out.TransactionID = idString(ev.Data.TransactionID)
			}
			out.RefundReference = text(ev.Data.Comments)
			if out.RefundReference == "" {
				out.RefundReference = text(ev.Data.Comment)
			}
		}
		if out.Reference == "" && out.TransactionID == "" && out.RefundReference == "" {
			return providers.Event{}, fmt.Errorf("%s: %w: %s names no charge or refund", Name, providers.ErrBadPayload, out.Type)
		}
	}
	return out, nil
}

// Sign returns the raw HMAC-SHA256 of body under the secret hash, which
// flutterwave-signature carries base64-encoded.
func Sign(secretHash string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secretHash))
	m.Write(body)
	return m.Sum(nil)
}
