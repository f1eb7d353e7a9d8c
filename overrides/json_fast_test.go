// Tests of the compact path of the JSON decoders against encoding/json's:
// random overrides round-trip exactly through MarshalJSON and
// UnmarshalJSON, and any input decodes (or is refused, with the same
// error) as encoding/json's path decodes it.

package overrides

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

// strictRecord is UnmarshalJSON through encoding/json alone.
func strictRecord(b []byte) (Override, error) {
	var x Override
	if err := decodeObject(b, &x, recordFields); err != nil {
		return Override{}, err
	}
	if err := x.checkFields(); err != nil {
		return Override{}, err
	}
	return x, nil
}

// sameDecoding fails t unless UnmarshalJSON decodes b as strictRecord.
func sameDecoding(t *testing.T, b []byte) (Override, error) {
	t.Helper()
	want, wantErr := strictRecord(b)
	var got Override
	err := got.UnmarshalJSON(b)
	if fmt.Sprint(err) != fmt.Sprint(wantErr) {
		t.Fatalf("%q: error %v, encoding/json's %v", b, err, wantErr)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\n%#v\nencoding/json's\n%#v", b, got, want)
	}
	return got, err
}

// randString is a string of n runes drawn from alphabet.
func randString(r *rand.Rand, alphabet []string, n int) string {
	var sb strings.Builder
	for range n {
		sb.WriteString(alphabet[r.IntN(len(alphabet))])
	}
	return sb.String()
}

var (
	nameRunes  = strings.Split("abcxyz_-.09AZ", "")
	valueRunes = append(strings.Split(`abz09_-./:@ <>&'"\`, ""), "é", "日本", "\u2028", "\t", "\n", "\x00", "\x7f", "😀")
)

// randOverride is a valid override (checkFields), with every field drawn
// at random, times included.
func randOverride(r *rand.Rand) Override {
	o := Override{Name: randString(r, nameRunes, 1+r.IntN(12)), Match: map[string]string{}}
	for range r.IntN(4) {
		v := randString(r, valueRunes, r.IntN(10))
		switch r.IntN(4) {
		case 0:
			v = "*"
		case 1:
			v = strings.ReplaceAll(v, "*", "") + "*"
		default:
			v = strings.ReplaceAll(v, "*", "")
		}
		o.Match[randString(r, nameRunes, 1+r.IntN(8))] = v
	}
	if r.IntN(3) == 0 {
		o.Match = nil
	}
	p := &o.Params
	switch r.IntN(6) {
	case 0:
		p.Deny = true
	case 1:
		p.Unlimited = true
	case 2:
		p.Capacity = 1 + r.Int64N(1<<40)
		if r.IntN(2) == 0 {
			p.RefillPerSecond = r.Float64() * 1e6
		} else {
			p.Refill = fmt.Sprintf("%d/m", 1+r.IntN(1000))
		}
	case 3:
		p.Limit, p.Window = 1+r.Int64N(1e9), time.Duration(1+r.Int64N(1e15))
	case 4:
		p.MaxInFlight = 1 + r.Int64N(1e6)
	}
	if !p.Deny && !p.Unlimited && r.IntN(3) == 0 {
		p.BlockFor = time.Duration(1+r.Int64N(1e9)) * time.Millisecond
	}
	p.Shadow = r.IntN(4) == 0
	if r.IntN(2) == 0 {
		o.TTL = 1 + r.Int64N(MaxTTL)
	}
	o.Note = randString(r, valueRunes, r.IntN(20))
	o.Source = []Source{"", SourceAPI, SourcePolicy}[r.IntN(3)]
	now := time.UnixMilli(r.Int64N(4e12)).UTC()
	o.Stamp(now, time.UnixMilli(r.Int64N(4e12)))
	return o
}

// Random overrides round-trip exactly: the record decodes to the override
// written (Source "" reads "api", a nil Match an empty one), through the
// compact path and as encoding/json's path decodes it.
func TestRecordRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 1))
	for range 20000 {
		o := randOverride(r)
		if err := o.checkFields(); err != nil {
			t.Fatalf("randOverride made an invalid override: %v", err)
		}
		b, err := o.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		got, err := sameDecoding(t, b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if o.Source == "" {
			o.Source = SourceAPI
		}
		if o.Match == nil {
			o.Match = map[string]string{}
		}
		if !reflect.DeepEqual(got, o) {
			t.Fatalf("%s:\n%#v\nwant\n%#v", b, got, o)
		}
		if !decodeCompact(b, &Override{}, recordFields) && !strings.Contains(string(b), `\`) {
			t.Fatalf("a record without escapes is not decoded on the compact path: %s", b)
		}
	}
}

// FuzzRecordDecoding: any input decodes, or is refused with the same
// error, as encoding/json's path does; a match and a string too.
func FuzzRecordDecoding(f *testing.F) {
	r := rand.New(rand.NewPCG(25, 2))
	for range 20 {
		o := randOverride(r)
		b, _ := o.MarshalJSON()
		f.Add(b)
	}
	for _, s := range []string{
		`{"name":"l","match":{},"capacity":01,"source":"api","created_at":null,"updated_at":null,"expires_at":null}`,
		`{"name":"l","match":{},"capacity":1.0,"source":"api","created_at":null,"updated_at":null,"expires_at":null}`,
		`{"name":"l","match":{"a":"b","a":"c"},"source":"api","created_at":null,"updated_at":null,"expires_at":null}`,
		`{"name":"l","match":{"a":"b"},"name":"m","source":"api","created_at":null,"updated_at":null,"expires_at":null}`,
		`{"name":"l","match":{"a":1},"source":"api","created_at":null,"updated_at":null,"expires_at":null}`,
		`{"name":"l","match":{},"note":"a\u00e9\ud800","source":"api","created_at":null,"updated_at":null,"expires_at":null}`,
		`{"name":"l","match":{},"note":"` + "\xff" + `","source":"api","created_at":null,"updated_at":null,"expires_at":null}`,
		`{"name":"l","match":{},"refill_per_second":-0,"source":"api","created_at":null,"updated_at":null,"expires_at":null}`,
		`{"name":"l","match":{},"refill_per_second":1e-3,"source":"api","created_at":null,"updated_at":null,"expires_at":null} `,
		`{"name":"l","match":{},}`, `{"name":"l",,"match":{}}`, `{"name":"l","match":{"a":"b",}}`, `{}`, `{`, `{"Name":"l","match":{}}`,
		`{"name":"l","match":{},"deny":true,"capacity":3}`, `{"name":"l","match":{"a":"*b"}}`, `{"name":"l","match":{},"expires_at":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sameDecoding(t, b)
		var fast, slow Override
		fastErr, slowErr := decodeMatch(&fast, b), decodeMatchJSON(&slow, b)
		if (fastErr == nil) != (slowErr == nil) || fastErr == nil && !reflect.DeepEqual(fast.Match, slow.Match) {
			t.Fatalf("match %q: %v %v, encoding/json's %v %v", b, fast.Match, fastErr, slow.Match, slowErr)
		}
		var s1, s2 string
		e1, e2 := decodeStr(b, &s1), json.Unmarshal(b, &s2)
		if len(b) > 0 && b[0] == '"' && ((e1 == nil) != (e2 == nil) || s1 != s2) {
			t.Fatalf("string %q: %q %v, encoding/json's %q %v", b, s1, e1, s2, e2)
		}
	})
}
