package reqjson_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/gowebpki/jcs"

	"github.com/oncepay/gateway/app/reqjson"
)

// Keys stored before Canonical moved from gowebpki/jcs to jsontext hold
// fingerprints of jcs's output: a retry of such a key must hash the same,
// so the two agree on every input — on what they accept and, byte for
// byte, on what they make of it.
func FuzzCanonicalAsJCS(f *testing.F) {
	for _, s := range []string{
		`{"amount":5000,"currency":"NGN","metadata":{"b":"2","a":"1"}}`,
		`{"b":1,"a":[1,2.5,1e21,-0,"x"]}`, `{"a":{"c":null,"b":true}}`, `"\u00e9\ud83d\ude00"`,
		`[1e-7,0.000001,123456789012345678901234567890]`, `{"a":1,"a":2}`, `{}`, ` 5 `,
		`{"\u20ac":1,"\ud83d\ude00":2,"\u00e9":3,"z":4}`, `"\u0000\u001f\u007f\u2028<>&"`,
		`[9007199254740993,-1.5e-300,1E400,0.1e1,5e-324]`, `{"a":"\ud800"}`, "{\"a\":\"\xff\"}",
		`{"a":1} x`, `{"a":`, `[1,]`, `  `, `{"a":1}{"b":2}`, "\ufeff{}",
	} {
		f.Add([]byte(s))
	}
	for _, depth := range []int{10000, 10001} { // both stop at 10,000 levels
		f.Add([]byte(strings.Repeat("[", depth) + strings.Repeat("]", depth)))
	}
	f.Add([]byte(`[{"b":"[","a":"\"{"}]`)) // brackets in strings do not nest
	f.Add(crafted(33, 1<<10))              // past maxDepth: jcs's own path
	f.Fuzz(func(t *testing.T, data []byte) {
		in := bytes.Clone(data)
		got, err := reqjson.Canonical(data)
		if !bytes.Equal(in, data) {
			t.Fatalf("Canonical changed its input: %q became %q", in, data)
		}
		want, jerr := jcs.Transform(in)
		if len(in) == 0 {
			jerr = errEmpty // Canonical refuses an empty body before either
		}
		if (err == nil) != (jerr == nil) {
			t.Fatalf("%q: Canonical error %v, jcs error %v", in, err, jerr)
		}
		if err == nil && !bytes.Equal(got, want) {
			t.Fatalf("%q: Canonical %q, jcs %q", in, got, want)
		}
	})
}

var errEmpty = bytesError("empty")

type bytesError string

func (e bytesError) Error() string { return string(e) }

func BenchmarkCanonical(b *testing.B) {
	body := []byte(`{"amount":5000,"currency":"NGN","payment_method":"tok_success","customer":{"email":"ada@example.com"},"metadata":{"order":"ord_123","channel":"app"}}`)
	b.Run("jsontext", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := reqjson.Canonical(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("jcs", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := jcs.Transform(body); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// crafted is the body that costs jsontext most: every object's members out
// of order, nested depth deep, about size bytes in all.
func crafted(depth, size int) []byte {
	pad := max(size/depth-12, 1)
	tail := `,"a":"` + strings.Repeat("x", pad) + `"}`
	return []byte(strings.Repeat(`{"b":`, depth) + "1" + strings.Repeat(tail, depth))
}

// A megabyte nested at the deepest Decode accepts (jsontext) and far deeper
// (jcs): neither costs what a deep body cost jsontext, a multiple of jcs.
func BenchmarkCanonicalCrafted(b *testing.B) {
	for _, depth := range []int{32, 33, 2000, 10000} {
		body := crafted(depth, 900<<10)
		b.Run(fmt.Sprintf("depth=%d/Canonical", depth), func(b *testing.B) {
			for b.Loop() {
				if _, err := reqjson.Canonical(body); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("depth=%d/jcs", depth), func(b *testing.B) {
			for b.Loop() {
				if _, err := jcs.Transform(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestCanonicalCraftedAsJCS(t *testing.T) {
	t.Parallel()
	for _, depth := range []int{1, 31, 32, 33, 100} {
		body := crafted(depth, 4<<10)
		got, err := reqjson.Canonical(body)
		if err != nil {
			t.Fatalf("depth %d: %v", depth, err)
		}
		want, err := jcs.Transform(body)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("depth %d: Canonical %.80q…, jcs %.80q… (%v)", depth, got, want, err)
		}
	}
}
