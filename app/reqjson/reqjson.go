// Package reqjson is the one way the gateway reads JSON from clients.
//
// Decode is strict where encoding/json is lenient, so that nothing upstream
// of the gateway (a WAF, a fraud check, the merchant's own logs) can read
// another amount than the one charged: encoding/json takes the last of two
// members with the same name and matches names case-insensitively, so
// {"amount":1,"AMOUNT":70000} would charge 70000 while most parsers see 1.
// Decode refuses duplicate names, names that differ from the schema's only
// in case, unknown names, text that is not UTF-8, strings holding NUL
// (which PostgreSQL's text cannot store) and anything after the value.
//
// Canonical is the RFC 8785 (JCS) form of a JSON text: members sorted,
// insignificant whitespace dropped, strings and numbers in one spelling.
// Idempotency fingerprints hash it, so a request re-serialised with other
// spacing or key order is the same request.
package reqjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/gowebpki/jcs"
)

// Error is a body that Decode refused; Reason is safe to show the client
// (it never echoes more of the input than a member name, quoted).
type Error struct {
	Kind   Kind
	Reason string
	// Field is the dotted path of the member a wrong type is about
	// ("metadata.order"), for the problem's errors[].field; "" when the
	// refusal is about the body as a whole.
	Field string
}

// Refusal is err as a problem's field and reason: the member Decode
// blamed, or "body", and why. For an error that is not an *Error (none
// of Decode's), a generic reason.
func Refusal(err error) (field, reason string) {
	var e *Error
	if !errors.As(err, &e) {
		return "body", "is not a valid request"
	}
	if e.Field != "" {
		return e.Field, e.Reason
	}
	return "body", e.Reason
}

// Kind sorts refusals, for callers that report some of them their own way.
type Kind int

// The kinds of refusal.
const (
	Malformed  Kind = iota // not one JSON object, too deep, a wrong type
	Duplicate              // a member name twice in one object
	CaseFolded             // a name that differs from the schema's only in case
	Unknown                // a name the schema does not have
	NUL                    // a string holding U+0000
	Encoding               // bytes that are not UTF-8, or an unpaired surrogate escape
)

func (e *Error) Error() string { return "reqjson: " + e.Reason }

// maxDepth bounds nesting: no request of the API nests more than a few
// levels, and a deep one is an attack on the parser's stack.
const maxDepth = 32

// Canonical returns the RFC 8785 canonical form of data, or an error when
// data is not exactly one JSON value in UTF-8 without duplicate names.
func Canonical(data []byte) ([]byte, error) {
	if len(data) == 0 {
		return nil, errors.New("reqjson: empty")
	}
	if !shallow(data) {
		// jsontext re-copies an out-of-order member at every level it
		// is nested in, so a crafted deep body of a megabyte costs it
		// several times what it costs jcs (hundreds of milliseconds),
		// and any merchant can send one: deep bodies keep jcs, whose
		// output is the same.
		return jcs.Transform(data)
	}
	// Canonicalize rewrites its value in place: a copy, so the caller's
	// body (Fiber's buffer) is never touched.
	v := jsontext.Value(bytes.Clone(data))
	if err := v.Canonicalize(); err != nil {
		return nil, err
	}
	// jsontext writes a number beyond float64 as the largest float64;
	// gowebpki/jcs, which made the fingerprints of keys stored before,
	// refused it, and so does Canonical, so that such a body still hashes
	// raw (FuzzCanonicalAsJCS).
	if bytes.Contains(v, maxFloat) && overflows(data) {
		return nil, errors.New("reqjson: a number out of range")
	}
	return v, nil
}

var maxFloat = []byte("1.7976931348623157e+308")

// shallow reports whether data nests no deeper than maxDepth, as far as a
// scan of its brackets outside strings can tell (malformed data is for
// the canonicalizer to refuse).
func shallow(data []byte) bool {
	depth, inString, escaped := 0, false, false
	for _, b := range data {
		switch {
		case escaped:
			escaped = false
		case inString:
			if b == '\\' {
				escaped = true
			} else if b == '"' {
				inString = false
			}
		case b == '"':
			inString = true
		case b == '{' || b == '[':
			if depth++; depth > maxDepth {
				return false
			}
		case b == '}' || b == ']':
			depth--
		}
	}
	return true
}

// overflows reports whether a number in data, valid JSON, is beyond float64.
func overflows(data []byte) bool {
	d := jsontext.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := d.ReadToken()
		if err != nil {
			return false
		}
		if tok.Kind() == '0' {
			if _, err := strconv.ParseFloat(tok.String(), 64); err != nil {
				return true
			}
		}
	}
}

// Decode decodes data, which must be exactly one JSON object, into v (a
// pointer to a struct) with the strict rules of the package. Every refusal
// is an *Error.
func Decode(data []byte, v any) error {
	if err := Check(data, v); err != nil {
		return err
	}
	strict := json.NewDecoder(bytes.NewReader(data))
	strict.DisallowUnknownFields()
	if err := strict.Decode(v); err != nil {
		return typeError(data, err)
	}
	return nil
}

// Check applies the rules of Decode to data for the type v points to,
// without decoding: for callers that decode themselves (with their own
// messages for type errors) and only need the strictness.
//
// Two passes, both without building values: jsontext's tokenizer, which
// refuses malformed JSON, invalid UTF-8 and a member name twice in one
// object, walks the members against the type for unknown and case-folded
// names; then escapes walks the bytes for what a tokenizer lets through
// (\u escapes of NUL or of a lone surrogate, nesting deeper than
// maxDepth). (encoding/json's Decoder.Token, which this used before,
// allocated every token and was a tenth of a new payment's CPU in the
// gateway.)
func Check(data []byte, v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		panic("reqjson: a non-nil pointer is needed")
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return &Error{Kind: Malformed, Reason: "is empty; send a JSON object"}
	}
	if !utf8.Valid(data) {
		return &Error{Kind: Encoding, Reason: "is not valid UTF-8"}
	}
	// The names first: a caller that tolerates some refusals (tenants'
	// field-level answers for NULs) must still learn of every duplicate
	// or case-folded name, wherever a NUL stands. The byte pass's
	// findings come after, and before a mere syntax error (the tokenizer
	// reads a lone surrogate escape as malformed).
	err := walk(data, rv.Type().Elem())
	if err == nil || err.Kind == Malformed {
		if e := escapes(data); e != nil {
			return e
		}
	}
	if err != nil {
		return err
	}
	return nil // not err: a nil *Error is a non-nil error
}

// walk checks data's tokens against t, the type it decodes into.
func walk(data []byte, t reflect.Type) *Error {
	w := walker{dec: jsontext.NewDecoder(bytes.NewReader(data))}
	tok, err := w.token()
	if err != nil {
		return err
	}
	if tok.Kind() != '{' {
		return &Error{Kind: Malformed, Reason: "must be a JSON object"}
	}
	if err := w.object(t); err != nil {
		return err
	}
	if _, err := w.dec.ReadToken(); !errors.Is(err, io.EOF) {
		return &Error{Kind: Malformed, Reason: "must be a single JSON object"}
	}
	return nil
}

// escapes refuses what a JSON tokenizer accepts and the gateway must not:
// a \u0000 escape (PostgreSQL's text cannot store NUL; a raw NUL byte is
// not JSON at all), a \u escape of a UTF-16 surrogate that is not a high
// one followed by an escaped low one (encoding/json would read it as
// U+FFFD: another string than the one sent), and nesting deeper than
// maxDepth (an attack on a parser's stack). Malformed JSON passes; the
// tokenizer refuses it with a better message.
func escapes(data []byte) *Error {
	inString := false
	depth := 0
	for i := 0; i < len(data); i++ {
		c := data[i]
		if !inString {
			switch c {
			case '"':
				inString = true
			case '{', '[':
				if depth++; depth > maxDepth {
					return &Error{Kind: Malformed, Reason: "is nested too deeply"}
				}
			case '}', ']':
				depth--
			}
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			if i+1 < len(data) && data[i+1] == 'u' {
				r, ok := hex4(data, i+2)
				switch {
				case !ok:
					return nil
				case r == 0:
					return &Error{Kind: NUL, Reason: "must not contain NUL characters (\\u0000)"}
				case r >= 0xDC00 && r <= 0xDFFF:
					return errUnpaired
				case r >= 0xD800 && r <= 0xDBFF:
					lo, ok := hex4(data, i+8)
					if !ok || data[i+6] != '\\' || data[i+7] != 'u' || lo < 0xDC00 || lo > 0xDFFF {
						return errUnpaired
					}
					i += 11
					continue
				}
				i += 5
				continue
			}
			i++ // the escaped character
		}
	}
	return nil
}

var errUnpaired = &Error{Kind: Encoding, Reason: "has a \\u escape of an unpaired UTF-16 surrogate"}

// hex4 reads four hex digits at data[i:].
func hex4(data []byte, i int) (rune, bool) {
	if i+4 > len(data) {
		return 0, false
	}
	var r rune
	for _, c := range data[i : i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return r, true
}

// walker checks the token stream against the target type before
// encoding/json ever sees it.
type walker struct{ dec *jsontext.Decoder }

func (w walker) token() (jsontext.Token, *Error) {
	tok, err := w.dec.ReadToken()
	if err != nil {
		return tok, syntaxError(err)
	}
	return tok, nil
}

// syntaxError is the tokenizer's refusal as an *Error.
func syntaxError(err error) *Error {
	var syn *jsontext.SyntacticError
	if !errors.As(err, &syn) {
		return &Error{Kind: Malformed, Reason: "is not valid JSON"}
	}
	if errors.Is(syn.Err, jsontext.ErrDuplicateName) {
		return &Error{Kind: Duplicate, Reason: fmt.Sprintf("has the member %s twice", quote(syn.JSONPointer.LastToken()))}
	}
	return &Error{Kind: Malformed, Reason: fmt.Sprintf("is not valid JSON (at byte %d)", syn.ByteOffset)}
}

// value walks one value whose first token is tok, expected to fit t (nil:
// anything). Only values whose type holds a struct are walked token by
// token; the rest are skipped, which still checks their syntax and names.
func (w walker) value(tok jsontext.Token, t reflect.Type) *Error {
	k := tok.Kind()
	if k != '{' && k != '[' {
		return nil
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if !holdsStruct(t) {
		if err := w.skipRest(); err != nil {
			return syntaxError(err)
		}
		return nil
	}
	if k == '{' {
		return w.object(t)
	}
	var elem reflect.Type
	if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
		elem = t.Elem()
	}
	for w.dec.PeekKind() != ']' {
		if err := w.next(elem); err != nil {
			return err
		}
	}
	_, err := w.token() // ']'
	return err
}

// skipRest skips the rest of the object or array whose opening token was
// just read.
func (w walker) skipRest() error {
	depth := w.dec.StackDepth()
	for w.dec.StackDepth() >= depth {
		if _, err := w.dec.ReadToken(); err != nil {
			return err
		}
	}
	return nil
}

var structCache sync.Map // reflect.Type -> bool

// holdsStruct reports whether a value of type t (nil: any) can hold a
// struct, whose member names must then be checked one by one. A nil t
// cannot: nothing is known of its names.
func holdsStruct(t reflect.Type) bool {
	if t == nil {
		return false
	}
	if v, ok := structCache.Load(t); ok {
		return v.(bool)
	}
	structCache.Store(t, true) // a recursive type is assumed to, while it is looked at
	var holds bool
	switch t.Kind() {
	case reflect.Struct:
		holds = true
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
		holds = holdsStruct(t.Elem())
	}
	structCache.Store(t, holds)
	return holds
}

// object walks the members of an object after its '{'.
func (w walker) object(t reflect.Type) *Error {
	var fields map[string]reflect.Type
	var elem reflect.Type
	if t != nil {
		switch t.Kind() {
		case reflect.Struct:
			fields = fieldsOf(t)
		case reflect.Map:
			elem = t.Elem()
		}
	}
	for w.dec.PeekKind() != '}' {
		tok, err := w.token()
		if err != nil {
			return err
		}
		name := tok.String()
		ft := elem
		if fields != nil {
			var ok bool
			if ft, ok = fields[name]; !ok {
				for known := range fields {
					if strings.EqualFold(known, name) {
						return &Error{Kind: CaseFolded, Reason: fmt.Sprintf("has the member %s, which must be written %s", quote(name), quote(known))}
					}
				}
				return &Error{Kind: Unknown, Reason: fmt.Sprintf("has the unknown member %s", quote(name))}
			}
		}
		if err := w.next(ft); err != nil {
			return err
		}
	}
	_, err := w.token() // '}'
	return err
}

// next reads the next value and walks it as a t.
func (w walker) next(t reflect.Type) *Error {
	tok, err := w.token()
	if err != nil {
		return err
	}
	return w.value(tok, t)
}

// quote shows a member name in an error, shortened so a client's huge name
// is not echoed back whole.
func quote(name string) string {
	const max = 64
	if len(name) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(name[cut]) {
			cut--
		}
		name = name[:cut] + "…"
	}
	return fmt.Sprintf("%q", name)
}

var fieldCache sync.Map // reflect.Type -> map[string]reflect.Type

// fieldsOf is the JSON member names of struct t and their types, as
// encoding/json names them (embedded structs flattened).
func fieldsOf(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := make(map[string]reflect.Type)
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range fieldsOf(ft) {
					m[k] = v
				}
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		m[name] = f.Type
	}
	fieldCache.Store(t, m)
	return m
}

// typeError explains encoding/json's complaint about a value's type in
// JSON's terms ("must be a string", not Go's "string" or
// "map[string]*string"), blaming the member it is about, without echoing
// the input back.
func typeError(data []byte, err error) *Error {
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) {
		if field := TypeErrorField(data, err); field != "" {
			return &Error{Kind: Malformed, Reason: "must be " + JSONType(typ.Type), Field: field}
		}
		return &Error{Kind: Malformed, Reason: "must be a JSON object"}
	}
	return &Error{Kind: Malformed, Reason: "is not a valid request"}
}

// JSONType names the JSON value that decodes into t, for a refusal.
func JSONType(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Map:
		if e := t.Elem(); e.Kind() == reflect.String || e.Kind() == reflect.Pointer && e.Elem().Kind() == reflect.String {
			return "an object of string values"
		}
		return "an object"
	case reflect.Struct:
		return "an object"
	case reflect.Slice, reflect.Array:
		if e := t.Elem(); e.Kind() == reflect.String {
			return "an array of strings"
		}
		return "an array"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return "of another type"
}

// TypeErrorField names the member an *json.UnmarshalTypeError from decoding
// data is about, as a dotted path from the root ("providers.paystack.secret_key").
// encoding/json's own Field stops at the last struct field, so a value
// inside a map is blamed on the whole map; the path is found again from the
// error's offset with jsontext, which tracks where it is. The names come
// from the request, so a path longer than maxPathLen, or with a control
// character, is not echoed: encoding/json's Field (ours: struct fields
// only) is given instead, as it is when the offset leads nowhere. "" when
// err is not a type error.
func TypeErrorField(data []byte, err error) string {
	var typ *json.UnmarshalTypeError
	if !errors.As(err, &typ) {
		return ""
	}
	d := jsontext.NewDecoder(bytes.NewReader(data))
	for {
		tok, rerr := d.ReadToken()
		if rerr != nil {
			return typ.Field
		}
		if k := tok.Kind(); k == '}' || k == ']' {
			continue
		}
		if d.InputOffset() >= typ.Offset {
			var parts []string
			for name := range d.StackPointer().Tokens() {
				parts = append(parts, name)
			}
			path := strings.Join(parts, ".")
			if len(path) > maxPathLen || strings.ContainsFunc(path, unicode.IsControl) {
				return typ.Field
			}
			return path
		}
	}
}

// maxPathLen bounds the path TypeErrorField echoes back.
const maxPathLen = 100
