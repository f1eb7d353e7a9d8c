// The answer to a request an override denies (deny: true): 403 denied.

package answer

// Deny is the Problem answering a request that an override of limit
// refuses outright (deny: true): HTTP 403 with code denied and "limit"
// naming the limit. Over gRPC such a request is a decision (OVER_LIMIT),
// not an error: the Problem's GRPC is 0.
func Deny(limit string) Problem {
	p := Errorf(Denied, "refused by an override of limit %q (deny): retrying is useless", limit)
	p.Limit = limit
	return p
}
