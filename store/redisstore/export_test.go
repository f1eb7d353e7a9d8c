// Internals the external tests use.

package redisstore

// ClassifyReply is classifyReply, for TestClassify.
var ClassifyReply = classifyReply

func ShareKeysForTest(k string) (string, string) { return shareKeys(k) }
