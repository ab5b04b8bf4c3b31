//! The part of grpc's channelz API (`grpc.channelz.v1`, grpc-proto's
//! `grpc/channelz/v1/channelz.proto`, Apache-2.0) that ghostip reads: channel targets,
//! subchannel ids, and each subchannel's target (its address) and connectivity state.
//!
//! Declared by hand with the field numbers of that file: a message's other fields (call
//! counts, traces, sockets, security) are skipped by the decoder, never stored, so nothing
//! of a client beyond addresses and states is kept.
#![allow(missing_docs)]

/// `GetTopChannelsRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GetTopChannelsRequest {
    #[prost(int64, tag = "1")]
    pub start_channel_id: i64,
    #[prost(int64, tag = "2")]
    pub max_results: i64,
}

/// `GetTopChannelsResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GetTopChannelsResponse {
    #[prost(message, repeated, tag = "1")]
    pub channel: Vec<Channel>,
    #[prost(bool, tag = "2")]
    pub end: bool,
}

/// `Channel`: its ref, data and subchannel refs.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Channel {
    #[prost(message, optional, tag = "1")]
    pub r#ref: Option<ChannelRef>,
    #[prost(message, optional, tag = "2")]
    pub data: Option<ChannelData>,
    #[prost(message, repeated, tag = "4")]
    pub subchannel_ref: Vec<SubchannelRef>,
}

/// `ChannelRef`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ChannelRef {
    #[prost(int64, tag = "1")]
    pub channel_id: i64,
}

/// `SubchannelRef`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SubchannelRef {
    #[prost(int64, tag = "7")]
    pub subchannel_id: i64,
}

/// `ChannelData`: state and target.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ChannelData {
    #[prost(message, optional, tag = "1")]
    pub state: Option<ChannelConnectivityState>,
    #[prost(string, tag = "2")]
    pub target: String,
}

/// `ChannelConnectivityState`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ChannelConnectivityState {
    /// `State`: UNKNOWN 0, IDLE 1, CONNECTING 2, READY 3, TRANSIENT_FAILURE 4, SHUTDOWN 5.
    #[prost(int32, tag = "1")]
    pub state: i32,
}

/// `GetSubchannelRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GetSubchannelRequest {
    #[prost(int64, tag = "1")]
    pub subchannel_id: i64,
}

/// `GetSubchannelResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GetSubchannelResponse {
    #[prost(message, optional, tag = "1")]
    pub subchannel: Option<Subchannel>,
}

/// `Subchannel`: its data (grpc-go: the address as target; grpc-java: the address group).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Subchannel {
    #[prost(message, optional, tag = "2")]
    pub data: Option<ChannelData>,
}

/// The methods' paths.
pub const GET_TOP_CHANNELS: &str = "/grpc.channelz.v1.Channelz/GetTopChannels";
/// `GetSubchannel`.
pub const GET_SUBCHANNEL: &str = "/grpc.channelz.v1.Channelz/GetSubchannel";
