package suggest

import "testing"

func TestDistance(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"", "abc", 3}, {"abc", "", 3}, {"key", "key", 0},
		{"kitten", "sitting", 3}, {"refil_per_second", "refill_per_second", 1},
		{"capcaity", "capacity", 1}, {"ca", "abc", 3}, {"limts", "limits", 1},
	} {
		if got := Distance(tc.a, tc.b, 100); got != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := Distance(tc.b, tc.a, 100); got != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tc.b, tc.a, got, tc.want)
		}
	}
}

func TestNearest(t *testing.T) {
	t.Parallel()
	fields := []string{"name", "key", "when", "capacity", "refill_per_second", "refill"}
	for s, want := range map[string]string{
		"refil_per_second": "refill_per_second", "Capacity": "capacity", "capcity": "capacity",
		"ky": "key", "refil": "refill", "names": "name", "wen": "when",
		"colour": "", "x": "", "": "", "burst": "", "refill_per_minute": "",
	} {
		if got := Nearest(s, fields); got != want {
			t.Errorf("Nearest(%q) = %q, want %q", s, got, want)
		}
	}
}
