/* An Ethernet switch with per-port statistics in registers and three tables:
 * an ACL (ternary, with priorities), destination-MAC forwarding (exact) and a
 * per-egress-port source MAC rewrite in egress. A "stats probe" frame
 * (EtherType 0x88B6) gets the ingress port's packet and byte totals written
 * into it, so the register state is visible in the packets themselves. */
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_PROBE = 0x88B6;

header eth_h {
    bit<48> dst;
    bit<48> src;
    bit<16> type;
}

header probe_h {
    bit<8>  version;
    bit<8>  port;
    bit<32> packets;
    bit<32> bytes;
}

struct headers_t {
    eth_h   eth;
    probe_h probe;
}

struct meta_t {
    bit<32> packets;
    bit<32> bytes;
}

parser StatsParser(packet_in pkt, out headers_t hdr, inout meta_t meta,
                   inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.eth);
        transition select(hdr.eth.type) {
            ETHERTYPE_PROBE: probe;
            default: accept;
        }
    }
    state probe {
        pkt.extract(hdr.probe);
        transition accept;
    }
}

control NoVerify(inout headers_t hdr, inout meta_t meta) {
    apply { }
}

control StatsIngress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    register<bit<32>>(512) rx_packets;
    register<bit<32>>(512) rx_bytes;

    action deny() {
        mark_to_drop(sm);
    }
    action permit() { }
    action to_port(bit<9> port) {
        sm.egress_spec = port;
    }
    action discard() {
        mark_to_drop(sm);
    }

    table acl {
        key = {
            hdr.eth.type: ternary;
            hdr.eth.src: ternary;
        }
        actions = { permit; deny; }
        default_action = permit();
        size = 64;
    }
    table dmac {
        key = { hdr.eth.dst: exact; }
        actions = { to_port; discard; }
        default_action = discard();
        size = 256;
    }

    apply {
        bit<32> index = (bit<32>)sm.ingress_port;
        rx_packets.read(meta.packets, index);
        rx_bytes.read(meta.bytes, index);
        meta.packets = meta.packets + 1;
        meta.bytes = meta.bytes + sm.packet_length;
        rx_packets.write(index, meta.packets);
        rx_bytes.write(index, meta.bytes);
        if (hdr.probe.isValid()) {
            hdr.probe.port = (bit<8>)sm.ingress_port;
            hdr.probe.packets = meta.packets;
            hdr.probe.bytes = meta.bytes;
        }
        if (acl.apply().hit) {
            if (sm.egress_spec == 511) {
                return;
            }
        }
        dmac.apply();
    }
}

control StatsEgress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    action set_src(bit<48> mac) {
        hdr.eth.src = mac;
    }
    table port_mac {
        key = { sm.egress_port: exact; }
        actions = { set_src; NoAction; }
        default_action = NoAction();
    }
    apply {
        port_mac.apply();
    }
}

control NoChecksum(inout headers_t hdr, inout meta_t meta) {
    apply { }
}

control StatsDeparser(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.eth);
        pkt.emit(hdr.probe);
    }
}

V1Switch(StatsParser(), NoVerify(), StatsIngress(), StatsEgress(), NoChecksum(),
         StatsDeparser()) main;
