package echo

import (
	"context"
	"net"
	"sort"
	"testing"
	"time"

	"google.golang.org/grpc"
	channelzpb "google.golang.org/grpc/channelz/grpc_channelz_v1"
	channelzsvc "google.golang.org/grpc/channelz/service"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

func serve(t *testing.T, g *grpc.Server) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// Two servers behind round_robin both answer, and channelz lists one subchannel per server
// address with the address as its target: what ghostip's channelz layer reads.
func TestRoundRobinOverTwoServersShowsInChannelz(t *testing.T) {
	var addrs []string
	for _, who := range []string{"a", "b"} {
		g := grpc.NewServer()
		Register(g, &Server{Who: who})
		addrs = append(addrs, serve(t, g))
	}
	r := manual.NewBuilderWithScheme("lab")
	r.InitialState(resolver.State{Addresses: []resolver.Address{{Addr: addrs[0]}, {Addr: addrs[1]}}})
	cc, err := grpc.NewClient("lab:///web",
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"round_robin":{}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	seen := map[string]bool{}
	for i := 0; i < 20 && len(seen) < 2; i++ {
		who, err := Call(ctx, cc, grpc.WaitForReady(true))
		if err != nil {
			t.Fatal(err)
		}
		seen[who] = true
	}
	if !seen["a"] || !seen["b"] {
		t.Fatalf("round_robin reached %v, want a and b", seen)
	}

	cz := grpc.NewServer()
	channelzsvc.RegisterChannelzServiceToServer(cz)
	czAddr := serve(t, cz)
	czc, err := grpc.NewClient(czAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer czc.Close()
	client := channelzpb.NewChannelzClient(czc)
	top, err := client.GetTopChannels(ctx, &channelzpb.GetTopChannelsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ch := range top.GetChannel() {
		if ch.GetData().GetTarget() != "lab:///web" {
			continue
		}
		for _, ref := range ch.GetSubchannelRef() {
			sc, err := client.GetSubchannel(ctx, &channelzpb.GetSubchannelRequest{SubchannelId: ref.GetSubchannelId()})
			if err != nil {
				t.Fatal(err)
			}
			if s := sc.GetSubchannel().GetData().GetState().GetState(); s != channelzpb.ChannelConnectivityState_READY {
				t.Errorf("subchannel %s is %v, want READY", sc.GetSubchannel().GetData().GetTarget(), s)
			}
			got = append(got, sc.GetSubchannel().GetData().GetTarget())
		}
	}
	sort.Strings(got)
	want := append([]string(nil), addrs...)
	sort.Strings(want)
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("channelz subchannel targets %v, want %v", got, want)
	}
}
