/* Beamer data plane (P4-16, v1model).
 *
 * Forwards IPv4 by longest-prefix match and puts each packet in the
 * strict-priority queue of its coflow's class. The class comes from the
 * Beamer tag, the first IPv4 option (docs/beamer-p4.md has the byte layout):
 * a coflow entry (experiment, stage, coflow) overrides a stage entry
 * (experiment, stage); everything else gets the default class, which the
 * control plane sets as the default action of `default_class`. The class is
 * written to standard_metadata.priority (queue 0 lowest, 7 highest) and to
 * the IPv4 DSCP as class selector CS<class>.
 *
 * TCP segments without payload (pure ACKs, SYN, FIN, RST) take the class of
 * `ack_class` instead, the top class unless the control plane changes it:
 * a flow's ACKs travel the reverse path, where they would otherwise wait
 * behind higher-class data and stall a flow whose own path is free.
 *
 * Drop rule: non-IPv4 frames, packets the parser rejects (truncated
 * headers, IPv4 version != 4, IHL < 5 or options beyond the packet), bad
 * IPv4 checksums, TTL <= 1 and LPM misses. Untagged packets and packets
 * whose first option is not a well-formed Beamer tag are forwarded with the
 * default class and their options untouched.
 */
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<8>  PROTO_TCP = 6;
const bit<8>  PROTO_UDP = 17;
/* First three option bytes of a Beamer tag: type 0x9E, length 12, version 1. */
const bit<24> BEAMER_TAG_PREFIX = 0x9E0C10;
const bit<24> BEAMER_TAG_PREFIX_MASK = 0xFFFFF0;
const bit<32> NUM_CLASSES = 8;
const bit<3>  TOP_CLASS = 7;

typedef bit<9>  egressSpec_t;
typedef bit<48> macAddr_t;
typedef bit<32> ip4Addr_t;

header ethernet_t {
    macAddr_t dstAddr;
    macAddr_t srcAddr;
    bit<16>   etherType;
}

header ipv4_t {
    bit<4>    version;
    bit<4>    ihl;
    bit<6>    dscp;
    bit<2>    ecn;
    bit<16>   totalLen;
    bit<16>   identification;
    bit<3>    flags;
    bit<13>   fragOffset;
    bit<8>    ttl;
    bit<8>    protocol;
    bit<16>   hdrChecksum;
    ip4Addr_t srcAddr;
    ip4Addr_t dstAddr;
}

/* The Beamer tag: IPv4 option type 0x9E, 12 bytes. */
header beamer_tag_t {
    bit<8>  optionType;
    bit<8>  optionLength;
    bit<4>  version;
    bit<4>  flags;
    bit<8>  reserved;
    bit<16> experiment_id;
    bit<16> stage_id;
    bit<32> coflow_id;
}

/* Options not understood here (after the tag, or all of them if there is
 * no tag), kept as opaque bytes and emitted unchanged. */
header ipv4_options_t {
    varbit<320> options;
}

header tcp_t {
    bit<16> srcPort;
    bit<16> dstPort;
    bit<32> seqNo;
    bit<32> ackNo;
    bit<4>  dataOffset;
    bit<4>  res;
    bit<8>  flags;
    bit<16> window;
    bit<16> checksum;
    bit<16> urgentPtr;
}

header udp_t {
    bit<16> srcPort;
    bit<16> dstPort;
    bit<16> length;
    bit<16> checksum;
}

struct metadata {
    bit<3> class_id;
}

struct headers {
    ethernet_t     ethernet;
    ipv4_t         ipv4;
    beamer_tag_t   beamer_tag;
    ipv4_options_t ipv4_options;
    tcp_t          tcp;
    udp_t          udp;
}

error {
    IPv4BadVersion,
    IPv4HeaderTooShort
}

parser MyParser(packet_in packet,
                out headers hdr,
                inout metadata meta,
                inout standard_metadata_t standard_metadata) {

    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }

    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        verify(hdr.ipv4.version == 4, error.IPv4BadVersion);
        verify(hdr.ipv4.ihl >= 5, error.IPv4HeaderTooShort);
        transition select(hdr.ipv4.ihl) {
            5: parse_l4;
            default: parse_first_option;
        }
    }

    state parse_first_option {
        /* A tag needs IHL >= 8 (12 option bytes) and its type, length and
         * version bytes; anything else is an unknown option. */
        transition select(hdr.ipv4.ihl, packet.lookahead<bit<24>>()) {
            (4w8 &&& 4w8, BEAMER_TAG_PREFIX &&& BEAMER_TAG_PREFIX_MASK): parse_beamer_tag;
            default: parse_unknown_options;
        }
    }

    state parse_beamer_tag {
        packet.extract(hdr.beamer_tag);
        transition select(hdr.ipv4.ihl) {
            8: parse_l4;
            default: parse_options_after_tag;
        }
    }

    state parse_options_after_tag {
        packet.extract(hdr.ipv4_options, ((bit<32>)hdr.ipv4.ihl - 8) * 32);
        transition parse_l4;
    }

    state parse_unknown_options {
        packet.extract(hdr.ipv4_options, ((bit<32>)hdr.ipv4.ihl - 5) * 32);
        transition parse_l4;
    }

    state parse_l4 {
        /* Only first fragments carry the transport header. */
        transition select(hdr.ipv4.fragOffset, hdr.ipv4.protocol) {
            (0, PROTO_TCP): parse_tcp;
            (0, PROTO_UDP): parse_udp;
            default: accept;
        }
    }

    state parse_tcp {
        packet.extract(hdr.tcp);
        transition accept;
    }

    state parse_udp {
        packet.extract(hdr.udp);
        transition accept;
    }
}

control MyVerifyChecksum(inout headers hdr, inout metadata meta) {
    apply {
        verify_checksum(
            hdr.ipv4.isValid(),
            { hdr.ipv4.version,
              hdr.ipv4.ihl,
              hdr.ipv4.dscp,
              hdr.ipv4.ecn,
              hdr.ipv4.totalLen,
              hdr.ipv4.identification,
              hdr.ipv4.flags,
              hdr.ipv4.fragOffset,
              hdr.ipv4.ttl,
              hdr.ipv4.protocol,
              hdr.ipv4.srcAddr,
              hdr.ipv4.dstAddr,
              hdr.beamer_tag.optionType,
              hdr.beamer_tag.optionLength,
              hdr.beamer_tag.version,
              hdr.beamer_tag.flags,
              hdr.beamer_tag.reserved,
              hdr.beamer_tag.experiment_id,
              hdr.beamer_tag.stage_id,
              hdr.beamer_tag.coflow_id,
              hdr.ipv4_options.options },
            hdr.ipv4.hdrChecksum,
            HashAlgorithm.csum16);
    }
}

control MyIngress(inout headers hdr,
                  inout metadata meta,
                  inout standard_metadata_t standard_metadata) {

    action drop() {
        mark_to_drop(standard_metadata);
    }

    action ipv4_forward(macAddr_t dstAddr, egressSpec_t port) {
        standard_metadata.egress_spec = port;
        hdr.ethernet.srcAddr = hdr.ethernet.dstAddr;
        hdr.ethernet.dstAddr = dstAddr;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }

    action set_class(bit<3> class_id) {
        meta.class_id = class_id;
    }

    table ipv4_lpm {
        key = {
            hdr.ipv4.dstAddr: lpm;
        }
        actions = {
            ipv4_forward;
            drop;
            NoAction;
        }
        size = 1024;
        default_action = drop();
    }

    /* Class of traffic without a matching tag entry. */
    table default_class {
        actions = {
            set_class;
        }
        default_action = set_class(0);
    }

    /* Class of TCP segments that carry no payload. */
    table ack_class {
        actions = {
            set_class;
            NoAction;
        }
        default_action = set_class(TOP_CLASS);
    }

    direct_counter(CounterType.packets_and_bytes) stage_counter;

    table stage_class {
        key = {
            hdr.beamer_tag.experiment_id: exact;
            hdr.beamer_tag.stage_id: exact;
        }
        actions = {
            set_class;
            NoAction;
        }
        size = 1024;
        default_action = NoAction();
        counters = stage_counter;
    }

    table coflow_class {
        key = {
            hdr.beamer_tag.experiment_id: exact;
            hdr.beamer_tag.stage_id: exact;
            hdr.beamer_tag.coflow_id: exact;
        }
        actions = {
            set_class;
            NoAction;
        }
        size = 4096;
        default_action = NoAction();
    }

    apply {
        if (standard_metadata.parser_error != error.NoError
                || standard_metadata.checksum_error == 1
                || !hdr.ipv4.isValid()) {
            drop();
            exit;
        }
        if (hdr.ipv4.ttl <= 1) {
            drop();
            exit;
        }
        ipv4_lpm.apply();
        default_class.apply();
        if (hdr.beamer_tag.isValid()) {
            stage_class.apply();
            coflow_class.apply();
        }
        if (hdr.tcp.isValid()
                && hdr.ipv4.totalLen == ((bit<16>)hdr.ipv4.ihl + (bit<16>)hdr.tcp.dataOffset) << 2) {
            ack_class.apply();
        }
        standard_metadata.priority = meta.class_id;
        hdr.ipv4.dscp = (bit<6>)meta.class_id << 3;
    }
}

control MyEgress(inout headers hdr,
                 inout metadata meta,
                 inout standard_metadata_t standard_metadata) {

    /* Packets and bytes that left through each class's queue. */
    counter(NUM_CLASSES, CounterType.packets_and_bytes) queue_counter;

    apply {
        queue_counter.count((bit<32>)meta.class_id);
    }
}

control MyComputeChecksum(inout headers hdr, inout metadata meta) {
    apply {
        update_checksum(
            hdr.ipv4.isValid(),
            { hdr.ipv4.version,
              hdr.ipv4.ihl,
              hdr.ipv4.dscp,
              hdr.ipv4.ecn,
              hdr.ipv4.totalLen,
              hdr.ipv4.identification,
              hdr.ipv4.flags,
              hdr.ipv4.fragOffset,
              hdr.ipv4.ttl,
              hdr.ipv4.protocol,
              hdr.ipv4.srcAddr,
              hdr.ipv4.dstAddr,
              hdr.beamer_tag.optionType,
              hdr.beamer_tag.optionLength,
              hdr.beamer_tag.version,
              hdr.beamer_tag.flags,
              hdr.beamer_tag.reserved,
              hdr.beamer_tag.experiment_id,
              hdr.beamer_tag.stage_id,
              hdr.beamer_tag.coflow_id,
              hdr.ipv4_options.options },
            hdr.ipv4.hdrChecksum,
            HashAlgorithm.csum16);
    }
}

control MyDeparser(packet_out packet, in headers hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.beamer_tag);
        packet.emit(hdr.ipv4_options);
        packet.emit(hdr.tcp);
        packet.emit(hdr.udp);
    }
}

V1Switch(
    MyParser(),
    MyVerifyChecksum(),
    MyIngress(),
    MyEgress(),
    MyComputeChecksum(),
    MyDeparser()
) main;
