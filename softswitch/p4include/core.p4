/* P4-16 core library declarations for the Beamer embedded target.
 * Names and signatures follow the P4-16 language specification so that
 * programs written for p4c compile here unchanged. */
#ifndef BEAMER_CORE_P4
#define BEAMER_CORE_P4

error {
    NoError,
    PacketTooShort,
    NoMatch,
    StackOutOfBounds,
    HeaderTooShort,
    ParserTimeout,
    ParserInvalidArgument
}

extern packet_in {
    void extract<T>(out T hdr);
    void extract<T>(out T variableSizeHeader, in bit<32> variableFieldSizeInBits);
    T lookahead<T>();
    void advance(in bit<32> sizeInBits);
    bit<32> length();
}

extern packet_out {
    void emit<T>(in T hdr);
}

extern void verify(in bool check, in error toSignal);

/* p4c's core.p4 marks it so; its P4Info carries the annotation. */
@noWarn("unused")
action NoAction() {}

match_kind {
    exact,
    ternary,
    lpm
}

#endif
