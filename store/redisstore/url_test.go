package redisstore_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/store/redisstore"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		url     string
		addrs   string
		single  bool
		tls     bool
		db      int
		user    string
		pass    string
		wantErr string
	}{
		{url: "redis://127.0.0.1:6380/2", addrs: "127.0.0.1:6380", single: true, db: 2},
		{url: "rediss://ann:s3cret@cache.example:6390", addrs: "cache.example:6390", single: true, tls: true, user: "ann", pass: "s3cret"},
		{url: "redis+cluster://10.0.0.1:7000,10.0.0.2:7001,10.0.0.3:7002", addrs: "10.0.0.1:7000 10.0.0.2:7001 10.0.0.3:7002"},
		{url: "rediss+cluster://:pw@a:1,b:2", addrs: "a:1 b:2", tls: true, pass: "pw"},
		{url: "memcached://x:1", wantErr: "scheme"},
		{url: "redis://", wantErr: "no host"},
		{url: "redis://h:1/x", wantErr: "database"},
	} {
		opt, err := redisstore.ParseURL(tc.url)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: err %v, want %q", tc.url, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.url, err)
			continue
		}
		if got := strings.Join(opt.InitAddress, " "); got != tc.addrs || opt.ForceSingleClient != tc.single ||
			(opt.TLSConfig != nil) != tc.tls || opt.SelectDB != tc.db || opt.Username != tc.user || opt.Password != tc.pass {
			t.Errorf("%s: addrs %q single %v tls %v db %d user %q pass %q", tc.url, got, opt.ForceSingleClient, opt.TLSConfig != nil, opt.SelectDB, opt.Username, opt.Password)
		}
	}
	if got := redisstore.Redact("redis://ann:s3cret@h:1/0"); strings.Contains(got, "s3cret") {
		t.Errorf("Redact: %s", got)
	}
}

func FuzzParseURL(f *testing.F) {
	for _, u := range []string{"redis://127.0.0.1:6379/0", "rediss://u:p@h:1", "redis+cluster://a:1,b:2,c:3", "redis://h:1/x", "x://y", "redis://[::1]:6379?dial_timeout=1s"} {
		f.Add(u)
	}
	f.Fuzz(func(t *testing.T, u string) {
		opt, err := redisstore.ParseURL(u)
		if err == nil && len(opt.InitAddress) == 0 {
			t.Fatalf("%q: no address and no error", u)
		}
		redisstore.Redact(u)
	})
}
