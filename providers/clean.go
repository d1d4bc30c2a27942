package providers

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Token reports whether s can be kept and shown as one of a provider's ids
// or our references: empty, or up to 255 printable ASCII bytes without a
// space. What a provider sends is untrusted input like any other:
// PostgreSQL refuses a NUL in text, and an id the gateway cannot store
// would fail the recording of a charge already made.
func Token(s string) bool {
	if len(s) > 255 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// failureCode reports whether s is a failure code as the gateway's are:
// 1 to 64 bytes of lower-case letters, digits and underscores.
func failureCode(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// message reports whether s can be shown to a merchant as it is: valid
// UTF-8 of at most 500 bytes without control characters.
func message(s string) bool {
	return len(s) <= 500 && utf8.ValidString(s) && strings.IndexFunc(s, unicode.IsControl) < 0
}

// Generic failures, for a code or message that cannot be kept.
const (
	genericDecline        = "card_declined"
	genericDeclineMessage = "The card was declined."
	genericRefusal        = "declined"
	genericRefusalMessage = "The refund was declined."
)

// Clean returns r as the gateway may store and show it, and names what it
// replaced (for the caller's log). An id that is not a Token is dropped:
// the outcome stands, since the charge is found by its reference without
// it. A failure code that is not snake_case becomes the generic decline,
// and a message that is not one line of text its generic message.
func (r Result) Clean() (Result, []string) {
	dropped := clean(answer{id: &r.TransactionID, idName: "transaction_id", code: &r.FailureCode, msg: &r.FailureMessage,
		failed: r.Outcome == OutcomeFailed, genericCode: genericDecline, genericMsg: genericDeclineMessage})
	if !Token(r.Currency) {
		// Compared with the payment's, never stored: one that is not a
		// token matches none, as "" does.
		r.Currency = ""
	}
	return r, dropped
}

// Clean is Result.Clean for a refund.
func (r RefundResult) Clean() (RefundResult, []string) {
	dropped := clean(answer{id: &r.RefundID, idName: "refund_id", code: &r.FailureCode, msg: &r.FailureMessage,
		failed: r.Outcome == OutcomeFailed, genericCode: genericRefusal, genericMsg: genericRefusalMessage})
	return r, dropped
}

// answer is what Result and RefundResult share for Clean: the provider's
// id, failure code and message, and the generic failure that replaces them.
type answer struct {
	id, code, msg           *string
	idName                  string
	failed                  bool
	genericCode, genericMsg string
}

func clean(a answer) (dropped []string) {
	if !Token(*a.id) {
		*a.id, dropped = "", append(dropped, a.idName)
	}
	if *a.code != "" && !failureCode(*a.code) {
		*a.code, *a.msg, dropped = a.genericCode, a.genericMsg, append(dropped, "failure_code")
	}
	if !message(*a.msg) {
		*a.msg, dropped = "", append(dropped, "failure_message")
		if a.failed {
			*a.msg = a.genericMsg
		}
	}
	return dropped
}
