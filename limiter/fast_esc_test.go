// fastPlain against a byte-by-byte reading, on every length to 40 with
// each byte to escape at each position.

package limiter

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/keyesc"
)

func TestFastPlain(t *testing.T) {
	want := func(v string) bool { return !strings.ContainsAny(v, "%"+keyesc.PolicyKey) } // (fastSpecial's bytes: a change to the set fails here)
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 41 {
		b := make([]byte, n)
		for range 50 {
			for i := range b {
				b[i] = byte(rng.IntN(256))
			}
			if v := string(b); fastPlain(v) != want(v) {
				t.Fatalf("fastPlain(%q) = %v", v, !want(v))
			}
			for i := range b { // every byte a neighbour of a special one: '$', ';', 'z', '|', '~'
				b[i] = "$;z|~&9"[rng.IntN(7)]
			}
			if v := string(b); !fastPlain(v) {
				t.Fatalf("fastPlain(%q) = false", v)
			}
			for i := range n {
				for _, c := range []byte("%" + keyesc.PolicyKey) {
					old := b[i]
					b[i] = c
					if v := string(b); fastPlain(v) {
						t.Fatalf("fastPlain(%q) = true", v)
					}
					b[i] = old
				}
			}
		}
	}
}
