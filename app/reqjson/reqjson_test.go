package reqjson_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"mime"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/reqjson"
)

type inner struct {
	Code string `json:"code"`
}

type request struct {
	Amount   json.RawMessage   `json:"amount"`
	Currency string            `json:"currency"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Items    []inner           `json:"items,omitempty"`
	Nested   *inner            `json:"nested,omitempty"`
	Count    int64             `json:"count,omitempty"`
	Tags     []string          `json:"tags,omitempty"`
}

func TestDecode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body, reason string // reason: "" accepted, else a substring of the refusal
	}{
		{"Plain", `{"amount":5000,"currency":"NGN"}`, ""},
		{"Nested", `{"amount":1,"metadata":{"a":"1","A":"2"},"items":[{"code":"x"}],"nested":{"code":"y"}}`, ""},
		{"DuplicateName", `{"amount":1,"amount":70000}`, `has the member "amount" twice`},
		{"CaseFoldedName", `{"amount":1,"AMOUNT":70000}`, `"AMOUNT", which must be written "amount"`},
		{"CaseFoldedOnly", `{"Amount":1}`, `must be written "amount"`},
		{"DuplicateInMetadata", `{"metadata":{"k":"a","k":"b"}}`, `"k" twice`},
		{"CaseFoldedInArray", `{"items":[{"CODE":"x"}]}`, `"CODE", which must be written "code"`},
		{"CaseFoldedInPointer", `{"nested":{"Code":"x"}}`, `must be written "code"`},
		{"UnknownName", `{"amount":1,"colour":"red"}`, `unknown member "colour"`},
		{"NULInValue", `{"currency":"NG\u0000N"}`, "NUL"},
		{"NULInName", `{"metadata":{"a\u0000":"b"}}`, "NUL"},
		{"InvalidUTF8", "{\"currency\":\"N\xffGN\"}", "UTF-8"},
		{"Trailing", `{"amount":1} {"amount":2}`, "single JSON object"},
		{"TrailingGarbage", `{"amount":1}x`, "single JSON object"},
		{"NotAnObject", `[1,2]`, "must be a JSON object"},
		{"Empty", ``, "empty"},
		{"Blank", " \n\t", "empty"},
		{"Syntax", `{"amount":}`, "not valid JSON"},
		{"WrongType", `{"currency":5}`, "currency: must be a string"},
		{"WrongTypeInAMap", `{"metadata":{"a":"1","order":5}}`, "metadata.order: must be a string"},
		{"WrongTypeInAnArray", `{"items":[{"code":"x"},{"code":7}]}`, "items.1.code: must be a string"},
		{"WrongTypeUnderALongName", `{"metadata":{"` + strings.Repeat("k", 200) + `":5}}`, "metadata: must be a string"},
		{"WrongTypeUnderAControlName", `{"metadata":{"a\u0007b":5}}`, "metadata: must be a string"},
		{"AMapForAnArray", `{"metadata":["x"]}`, "metadata: must be an object of string values"},
		{"AStringForAnArray", `{"tags":"x"}`, "tags: must be an array of strings"},
		{"AStringForAnInteger", `{"count":"5"}`, "count: must be an integer"},
		{"LoneHighSurrogate", `{"currency":"\ud800"}`, "unpaired"},
		{"LoneLowSurrogate", `{"currency":"\udc00x"}`, "unpaired"},
		{"HighThenNotLow", `{"currency":"\ud800\u0041"}`, "unpaired"},
		{"PairedSurrogates", `{"currency":"\ud83d\ude00"}`, ""},
		{"EscapedBackslashThenU", `{"currency":"\\ud800"}`, ""},
		{"Deep", `{"amount":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`, "nested too deeply"},
		{"DeepObjects", `{"metadata":` + strings.Repeat(`{"a":`, 40) + `1` + strings.Repeat("}", 40) + `}`, "nested too deeply"},
		{"BracketsInAString", `{"currency":"` + strings.Repeat("[{", 40) + `"}`, ""},
		{"DuplicateInsideAnyValue", `{"amount":{"a":1,"b":[{"c":1,"c":2}]}}`, `has the member "c" twice`},
		{"DuplicateInArrayOfStructs", `{"items":[{"code":"x","code":"y"}]}`, `"code" twice`},
		{"UnknownInArrayOfStructs", `{"items":[{"code":"x"},{"colour":"y"}]}`, `unknown member "colour"`},
		{"NULEscapedInAnyValue", `{"amount":["\u0000"]}`, "NUL"},
		{"EscapedBackslashThenU0000", `{"currency":"\\u0000"}`, ""},
		{"SyntaxInsideAnyValue", `{"amount":[1,}`, "not valid JSON"},
		{"UnclosedObject", `{"amount":1`, "not valid JSON"},
		{"CaseFoldedAfterANUL", `{"metadata":{"k":"\u0000"},"currency":"NGN","CURRENCY":"USD"}`, `must be written "currency"`},
		{"DuplicateAfterANUL", `{"metadata":{"k":"\u0000"},"currency":"NGN","currency":"USD"}`, `"currency" twice`},
		{"DuplicateAfterDeepNesting", `{"amount":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `,"currency":"NGN","currency":"USD"}`, `"currency" twice`},
		{"LoneSurrogateBeforeASyntaxError", `{"currency":"\ud800","amount":}`, "unpaired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var r request
			err := reqjson.Decode([]byte(tc.body), &r)
			if tc.reason == "" {
				require.NoError(t, err)
				return
			}
			var e *reqjson.Error
			require.True(t, errors.As(err, &e), "want a *reqjson.Error, got %v", err)
			// A wrong type names its member as the problem's field;
			// every other refusal is about the body.
			field, reason := reqjson.Refusal(err)
			require.Contains(t, field+": "+reason, tc.reason)
		})
	}
}

func TestDecodeDoesNotEchoLongNames(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 10_000)
	err := reqjson.Decode([]byte(`{"`+long+`":1}`), &request{})
	require.Error(t, err)
	require.Less(t, len(err.Error()), 200)
}

func TestCanonical(t *testing.T) {
	t.Parallel()
	same := []string{
		`{"amount":5000,"currency":"NGN","metadata":{"b":"2","a":"1"}}`,
		"{ \"currency\" : \"NGN\",\n  \"amount\": 5000, \"metadata\": {\"a\":\"1\",\"b\":\"2\"} }",
		`{"metadata":{"a":"\u0031","b":"2"},"currency":"\u004eGN","amount":5000}`,
		`{"amount":5e3,"currency":"NGN","metadata":{"a":"1","b":"2"}}`,
	}
	want, err := reqjson.Canonical([]byte(same[0]))
	require.NoError(t, err)
	require.Equal(t, `{"amount":5000,"currency":"NGN","metadata":{"a":"1","b":"2"}}`, string(want))
	for _, s := range same[1:] {
		got, err := reqjson.Canonical([]byte(s))
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "%s", s)
	}
	for _, s := range []string{
		`{"amount":5001,"currency":"NGN","metadata":{"a":"1","b":"2"}}`,
		`{"amount":"5000","currency":"NGN","metadata":{"a":"1","b":"2"}}`,
		`{"amount":5000,"currency":"ngn","metadata":{"a":"1","b":"2"}}`,
		`{"amount":5000,"currency":"NGN","metadata":{"a":"1","b":"2","c":"3"}}`,
	} {
		got, err := reqjson.Canonical([]byte(s))
		require.NoError(t, err)
		require.NotEqual(t, string(want), string(got), "a changed value is another request: %s", s)
	}
	for _, s := range []string{``, `{"a":1,"a":2}`, `{"a":1} x`, "{\"a\":\"\xff\"}", `{"a":`} {
		_, err := reqjson.Canonical([]byte(s))
		require.Error(t, err, "%q", s)
	}
}

// FuzzDecode: Decode never panics, and whatever it accepts encoding/json
// reads the same way, with no duplicate or case-folded names left to
// disagree about.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"amount":5000,"currency":"NGN"}`, `{"amount":1,"AMOUNT":2}`, `{"metadata":{"a":"b"}}`,
		`{"items":[{"code":"x"},{"code":"y"}]}`, `{"nested":null}`, `{"amount":[{"x":{}}]}`,
		"{\"currency\":\"\\u0000\"}", `{}`, `[]`, `"x"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var r request
		if err := reqjson.Decode(data, &r); err != nil {
			var e *reqjson.Error
			if !errors.As(err, &e) {
				t.Fatalf("refusal is not an *Error: %v", err)
			}
			return
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatalf("accepted a body encoding/json cannot read: %v", err)
		}
		for name := range m {
			switch name {
			case "amount", "currency", "metadata", "items", "nested":
			default:
				t.Fatalf("accepted the member %q", name)
			}
		}
		if bytes.IndexByte([]byte(r.Currency), 0) >= 0 {
			t.Fatalf("accepted a NUL")
		}
		// What it accepts, it reads as encoding/json does: no checker
		// upstream can see another value than the one we act on.
		var std request
		if err := json.Unmarshal(data, &std); err != nil {
			t.Fatalf("accepted a body encoding/json refuses for the type: %v", err)
		}
		if !reflect.DeepEqual(r, std) {
			t.Fatalf("decoded %+v, encoding/json reads %+v, from %q", r, std, data)
		}
	})
}

// FuzzCanonical: canonicalisation never panics, is idempotent, and its
// output is JSON that means the same as its input.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{
		`{"b":1,"a":[1,2.5,1e21,-0,"x"]}`, `{"a":{"c":null,"b":true}}`, `"\u00e9\ud83d\ude00"`,
		`[1e-7,0.000001,123456789012345678901234567890]`, `{"a":1,"a":2}`, `{}`, ` 5 `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := reqjson.Canonical(data)
		if err != nil {
			return
		}
		again, err := reqjson.Canonical(c)
		if err != nil || !bytes.Equal(c, again) {
			t.Fatalf("not idempotent: %q -> %q -> %q (%v)", data, c, again, err)
		}
		var a, b any
		if json.Unmarshal(data, &a) != nil {
			return // JCS accepts a few inputs encoding/json does not (e.g. lone numbers it reads alike)
		}
		if err := json.Unmarshal(c, &b); err != nil {
			t.Fatalf("canonical form is not JSON: %q: %v", c, err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("canonical form means something else: %q reads %#v, %q reads %#v", data, a, c, b)
		}
	})
}

func BenchmarkDecode(b *testing.B) {
	body := []byte(`{"amount":5000,"currency":"NGN","items":[{"code":"x"}],"metadata":{"order":"ord_123","channel":"app"},"nested":{"code":"y"}}`)
	b.ReportAllocs()
	for b.Loop() {
		var r request
		if err := reqjson.Decode(body, &r); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzJSONLabel: whatever a client labels its body, the check never
// panics, and what it takes is JSON or text in UTF-8 (or US-ASCII).
func FuzzJSONLabel(f *testing.F) {
	for _, s := range []string{"application/json", "application/json; charset=utf-8", "text/plain;charset=UTF-8",
		"application/merge-patch+json", "application/x-www-form-urlencoded", "application/json; charset", "\x00",
		`application/json; charset="utf-8"`, "APPLICATION/JSON;CHARSET=UTF8;x=\"\\\x00\"", "application/+json"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, contentType string) {
		if !reqjson.JSONLabel(contentType) {
			return
		}
		mt, params, err := mime.ParseMediaType(contentType)
		if err != nil {
			t.Fatalf("%q taken, but it does not parse: %v", contentType, err)
		}
		if mt != "application/json" && mt != "text/plain" && !(strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")) {
			t.Fatalf("%q taken as JSON: %q", contentType, mt)
		}
		if cs, ok := params["charset"]; ok && !slices.Contains([]string{"utf-8", "utf8", "us-ascii"}, strings.ToLower(cs)) {
			t.Fatalf("%q taken with charset %q", contentType, cs)
		}
	})
}
