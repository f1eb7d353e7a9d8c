package keyesc

import "testing"

func TestAppend(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ s, special, want string }{
		{"acme", ":{}", "acme"},
		{"a:b{c}%", ":{}", "a%3Ab%7Bc%7D%25"},
		{"x|y=z", "|=", "x%7Cy%3Dz"},
		{"", "|", ""},
	} {
		if got := string(Append([]byte("p/"), tc.s, tc.special)); got != "p/"+tc.want {
			t.Errorf("%q: %q, want %q", tc.s, got, "p/"+tc.want)
		}
	}
}
