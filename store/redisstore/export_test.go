// Internals the external tests use.

package redisstore

// ClassifyReply is classifyReply, for TestClassify.
var ClassifyReply = classifyReply
