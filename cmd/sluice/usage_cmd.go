// sluice usage: a summary of a --usage-export file per limit and per a
// descriptor's value (or the whole key), as a table or JSON.

package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

type usageCmd struct {
	File  []string      `name:"file" required:"" help:"A --usage-export file (repeat for several; its rotated FILE.1, FILE.2, FILE.3 are read too when they exist)." type:"path"`
	By    string        `name:"by" default:"key" help:"Group by: key (the whole key), limit, instance, or a descriptor's name (the value after NAME: in the key, e.g. tenant for a key tenant:acme; rows whose key has no such part count as \"-\")."`
	Since time.Duration `name:"since" default:"24h" help:"Rows of intervals ending within this long before now (0: every row)."`
	Limit string        `name:"limit" help:"Only this limit's rows."`
	JSON  bool          `name:"json" help:"Print JSON (an array of objects) instead of a table."`
}

// usageSum is one group's sums.
type usageSum struct {
	Limit         string `json:"limit"`
	By            string `json:"by"`
	Value         string `json:"value"`
	Admitted      int64  `json:"admitted"`
	AdmittedCost  int64  `json:"admitted_cost"`
	Refused       int64  `json:"refused"`
	ShadowRefused int64  `json:"shadow_refused,omitempty"`
	SpendMicros   *int64 `json:"spend_micros,omitempty"`
	Rows          int    `json:"rows"`
}

func (c usageCmd) Run(e *env) error {
	var from time.Time
	if c.Since > 0 {
		from = time.Now().Add(-c.Since)
	}
	sums := map[[2]string]*usageSum{}
	read := 0
	for _, f := range c.File {
		for _, path := range append([]string{f}, rotated(f)...) {
			n, err := readUsage(path, func(r UsageRow) {
				if (c.Limit != "" && r.Limit != c.Limit) || (!from.IsZero() && r.End.Before(from)) {
					return
				}
				v := groupValue(c.By, r)
				k := [2]string{r.Limit, v}
				if c.By == "limit" {
					k[0] = ""
				}
				s := sums[k]
				if s == nil {
					s = &usageSum{Limit: k[0], By: c.By, Value: v}
					sums[k] = s
				}
				s.Admitted += r.Admitted
				s.AdmittedCost += r.AdmittedCost
				s.Refused += r.Refused
				s.ShadowRefused += r.ShadowRefused
				if r.SpendMicros != nil {
					if s.SpendMicros == nil {
						s.SpendMicros = new(int64)
					}
					*s.SpendMicros += *r.SpendMicros
				}
				s.Rows++
			})
			if err != nil && (path == f || !errors.Is(err, os.ErrNotExist)) {
				return err
			}
			read += n
		}
	}
	out := make([]*usageSum, 0, len(sums))
	for _, s := range sums {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *usageSum) int {
		if a.Limit != b.Limit {
			return strings.Compare(a.Limit, b.Limit)
		}
		if a.AdmittedCost != b.AdmittedCost {
			return int(min(max(b.AdmittedCost-a.AdmittedCost, -1), 1))
		}
		return strings.Compare(a.Value, b.Value)
	})
	if c.JSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	return printUsage(e.stdout, c.By, out)
}

// rotated are f's rotated files that exist, oldest last.
func rotated(f string) []string {
	var out []string
	for i := 1; i <= usageFilesKept; i++ {
		out = append(out, fmt.Sprintf("%s.%d", f, i))
	}
	return out
}

// readUsage calls fn for each row of a usage file; it returns the rows
// read. A line that is not a row is an error naming the line.
func readUsage(path string, fn func(UsageRow)) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	n := 0
	for line := 1; sc.Scan(); line++ {
		b := sc.Bytes()
		if len(strings.TrimSpace(string(b))) == 0 {
			continue
		}
		var r UsageRow
		if err := json.Unmarshal(b, &r); err != nil {
			return n, fmt.Errorf("%s:%d: not a usage row: %v", path, line, err)
		}
		fn(r)
		n++
	}
	return n, sc.Err()
}

// groupValue is what a row counts under for --by.
func groupValue(by string, r UsageRow) string {
	switch by {
	case "key":
		return r.Key
	case "limit":
		return r.Limit
	case "instance":
		return r.Instance
	}
	// A descriptor: the part after "by:" in the key (keys are rendered
	// from templates such as "tenant:{tenant}:route:{route}", values
	// escaped so that they hold no ":").
	parts := strings.Split(r.Key, ":")
	for i := 0; i+1 < len(parts); i++ {
		if parts[i] == by {
			return parts[i+1]
		}
	}
	if r.Key == "other" {
		return "other"
	}
	return "-"
}

func printUsage(w io.Writer, by string, sums []*usageSum) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	head := strings.ToUpper(by)
	fmt.Fprintf(tw, "LIMIT\t%s\tADMITTED\tADMITTED_COST\tREFUSED\tSPEND_USD\t\n", head)
	for _, s := range sums {
		spend := "-"
		if s.SpendMicros != nil {
			spend = fmt.Sprintf("%.6f", float64(*s.SpendMicros)/1e6)
		}
		lim := s.Limit
		if lim == "" {
			lim = "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t\n", lim, s.Value, s.Admitted, s.AdmittedCost, s.Refused, spend)
	}
	return tw.Flush()
}
