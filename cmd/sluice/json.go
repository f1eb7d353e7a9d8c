// JSON lines: one value per line, as the commands print them.

package main

import "encoding/json"

func jsonLine(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	return append(b, '\n'), err
}
