// Package echo is the lab's one unary gRPC method, ghostip.lab.Echo/Echo: the server answers
// with its own pod name and address, so a client's log shows which backend served each call.
//
// The messages are protobuf's well-known StringValue, so no generated code is needed.
package echo

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Method is the full name of the Echo method.
const Method = "/ghostip.lab.Echo/Echo"

// Server answers Echo with Who.
type Server struct {
	// Who is returned by every call: the pod name and address of the server.
	Who string
}

func (s *Server) echo(_ context.Context, _ *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	return wrapperspb.String(s.Who), nil
}

type echoer interface {
	echo(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error)
}

// Register adds the Echo service to g.
func Register(g *grpc.Server, s *Server) {
	g.RegisterService(&grpc.ServiceDesc{
		ServiceName: "ghostip.lab.Echo",
		HandlerType: (*echoer)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Echo",
			Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				in := new(wrapperspb.StringValue)
				if err := dec(in); err != nil {
					return nil, err
				}
				return srv.(echoer).echo(ctx, in)
			},
		}},
		Metadata: "echo",
	}, s)
}

// Call makes one Echo call on cc and returns the server's answer.
func Call(ctx context.Context, cc grpc.ClientConnInterface, opts ...grpc.CallOption) (string, error) {
	out := new(wrapperspb.StringValue)
	if err := cc.Invoke(ctx, Method, wrapperspb.String("ping"), out, opts...); err != nil {
		return "", err
	}
	return out.GetValue(), nil
}
