// Package benchanswers is `seckill-bench answers`: the answer a buyer gets
// once a sale is sold out, beside the floor of any answer through the
// same API. It drives, with the sale's load generator (saleload), the
// service and a bare floor server with the same Connect handler, codec
// and HTTP server answering the same SOLD_OUT error (alone, and after the
// one Redis round trip of the buyer-state read), each a process of its
// own, and reports the server's and Redis's CPU per answer, the modes
// interleaved within each run.
//
// Run is the command. Floor is the floor server: the hidden
// `seckill-bench answer-floor` command, which Run starts as a subprocess
// of the running binary.
package benchanswers
