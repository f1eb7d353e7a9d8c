package redisstore_test

import (
	"testing"

	"github.com/sluicehq/sluice/store/book"
	"github.com/sluicehq/sluice/store/book/booktest"
	"github.com/sluicehq/sluice/store/redisstore"
)

// The Redis book follows the same rules as the in-memory one.
func TestBookConformance(t *testing.T) {
	booktest.Run(t, func(t *testing.T, cfg book.Config) book.Book { return redisstore.NewBook(open(t), cfg) })
}

// ... on a cluster too (lease hashes and the receipts' order live in
// different slots).
func TestClusterBookConformance(t *testing.T) {
	booktest.Run(t, func(t *testing.T, cfg book.Config) book.Book { return redisstore.NewBook(openCluster(t), cfg) })
}
