package events

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// payload is the envelope as encoding/json makes it: the reference
// envelope must match byte for byte, so deliveries signed before and after
// it was written out are the same bytes.
type payload struct {
	ID        string          `json:"id"`
	Object    string          `json:"object"`
	Type      string          `json:"type"`
	CreatedAt time.Time       `json:"created_at"`
	Data      json.RawMessage `json:"data"`
}

func TestEnvelopeIsEncodingJSONs(t *testing.T) {
	t.Parallel()
	objects := []any{
		map[string]any{"id": "pay_1", "amount": 5000, "metadata": json.RawMessage(`{"a":"<b>&</b>","ü":"\u2028"}`)},
		map[string]any{"description": "Tom & Jerry's <shop>", "email": "ada@example.com", "nothing": nil},
		[]any{},
		"a string",
		struct {
			N int64   `json:"n"`
			F float64 `json:"f"`
		}{N: -1 << 62, F: 1e21},
	}
	times := []time.Time{
		time.Date(2026, 12, 6, 4, 30, 0, 0, time.UTC),
		time.Date(2026, 12, 6, 4, 30, 1, 123000000, time.UTC),
		time.Date(2026, 1, 2, 3, 4, 5, 100000000, time.UTC),
		time.Date(1999, 12, 31, 23, 59, 59, 999000000, time.UTC),
	}
	for _, typ := range Types {
		for _, o := range objects {
			for _, at := range times {
				obj, err := json.Marshal(o)
				require.NoError(t, err)
				want, err := json.Marshal(payload{ID: "evt_0123456789abcdef0123456789abcdef", Object: "event", Type: typ,
					CreatedAt: at, Data: json.RawMessage(`{"object":` + string(obj) + `}`)})
				require.NoError(t, err)
				require.Equal(t, string(want), string(envelope("evt_0123456789abcdef0123456789abcdef", typ, at, obj)))
			}
		}
	}
}

// An Encoded object is carried as it is: the payload is the one
// encoding/json makes of the value it encodes.
func TestEncodedObjectIsTheValuesEncoding(t *testing.T) {
	t.Parallel()
	for _, o := range []any{
		map[string]any{"id": "pay_1", "amount": 5000, "email": "a&b@example.com", "description": "<shop> \u2028",
			"metadata": map[string]any{"k": "v"}},
		[]any{},
		"a string",
	} {
		obj, err := json.Marshal(o)
		require.NoError(t, err)
		requireSamePayload(t, o, Encoded(obj))
	}
}

// requireSamePayload builds one event with each object and requires the
// same payload (but for the random ids) and dedupe.
func requireSamePayload(t *testing.T, wantObject, gotObject any) (got Event) {
	t.Helper()
	at := time.Date(2026, 12, 6, 4, 30, 1, 123000000, time.UTC)
	p := Params{MerchantID: "ten_1", Type: PaymentSucceeded, ObjectID: "pay_1", Object: wantObject}
	want, err := build(p, at)
	require.NoError(t, err)
	p.Object = gotObject
	got, err = build(p, at)
	require.NoError(t, err)
	require.Equal(t, string(want.Payload), strings.Replace(string(got.Payload), got.ID, want.ID, 1))
	require.Equal(t, want.Dedupe, got.Dedupe)
	return got
}

// Encoded is its JSON wherever encoding/json meets it; empty, null.
func TestEncodedMarshalsAsItself(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(struct {
		O Encoded `json:"o"`
		N Encoded `json:"n"`
	}{O: Encoded(`{"a":1}`)})
	require.NoError(t, err)
	require.Equal(t, `{"o":{"a":1},"n":null}`, string(b))

	got := requireSamePayload(t, json.RawMessage(nil), Encoded(nil))
	require.True(t, json.Valid(got.Payload), string(got.Payload))
}

func BenchmarkEnvelope(b *testing.B) {
	obj, _ := json.Marshal(map[string]any{"id": "pay_1", "object": "payment", "amount": 5000, "currency": "NGN",
		"status": "succeeded", "provider": "simulator", "email": "ada@example.com", "metadata": map[string]any{}})
	at := time.Now().UTC().Truncate(time.Millisecond)
	b.Run("written out", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = envelope("evt_0123456789abcdef0123456789abcdef", PaymentSucceeded, at, obj)
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(payload{ID: "evt_0123456789abcdef0123456789abcdef", Object: "event", Type: PaymentSucceeded,
				CreatedAt: at, Data: json.RawMessage(`{"object":` + string(obj) + `}`)})
		}
	})
}
