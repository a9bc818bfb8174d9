package sim

import (
	"errors"
	"fmt"
	"image"
	"image/color"
	"math/big"
	"strings"
	"unicode/utf8"
)

// The calculator computes with exact rationals (math/big.Rat), so results
// are the same on every platform and 0.1+0.2 is 0.3.

const (
	opAdd = '+'
	opSub = '−'
	opMul = '×'
	opDiv = '÷'
)

func isOp(r rune) bool { return r == opAdd || r == opSub || r == opMul || r == opDiv }

var errDivZero = errors.New("Can't divide by 0")

// evalFormula evaluates a formula such as "−12+3×4%" with the usual
// precedence.
func evalFormula(f string) (*big.Rat, error) {
	rs := []rune(f)
	i := 0
	var nums []*big.Rat
	var ops []rune
	for {
		neg := false
		if i < len(rs) && rs[i] == opSub && len(nums) == 0 {
			neg = true
			i++
		}
		start := i
		for i < len(rs) && (rs[i] >= '0' && rs[i] <= '9' || rs[i] == '.') {
			i++
		}
		if i == start {
			return nil, errors.New("incomplete formula")
		}
		num := string(rs[start:i])
		if strings.HasSuffix(num, ".") {
			num += "0"
		}
		v, ok := new(big.Rat).SetString(num)
		if !ok {
			return nil, fmt.Errorf("bad number %q", num)
		}
		for i < len(rs) && rs[i] == '%' {
			v.Quo(v, big.NewRat(100, 1))
			i++
		}
		if neg {
			v.Neg(v)
		}
		nums = append(nums, v)
		if i == len(rs) {
			break
		}
		if !isOp(rs[i]) {
			return nil, fmt.Errorf("unexpected %q", rs[i])
		}
		ops = append(ops, rs[i])
		i++
	}
	// Multiplication and division first, left to right.
	terms := []*big.Rat{nums[0]}
	var addOps []rune
	for k, op := range ops {
		rhs := nums[k+1]
		switch op {
		case opMul:
			last := terms[len(terms)-1]
			last.Mul(last, rhs)
		case opDiv:
			if rhs.Sign() == 0 {
				return nil, errDivZero
			}
			last := terms[len(terms)-1]
			last.Quo(last, rhs)
		default:
			terms = append(terms, rhs)
			addOps = append(addOps, op)
		}
	}
	sum := new(big.Rat).Set(terms[0])
	for k, op := range addOps {
		if op == opAdd {
			sum.Add(sum, terms[k+1])
		} else {
			sum.Sub(sum, terms[k+1])
		}
	}
	return sum, nil
}

// formatRat writes a result with at most ten decimals and no trailing
// zeros, using the minus sign the keypad shows.
func formatRat(r *big.Rat) string {
	var s string
	if r.IsInt() {
		s = r.Num().String()
	} else {
		s = strings.TrimRight(strings.TrimRight(r.FloatString(10), "0"), ".")
	}
	if s == "-0" {
		s = "0"
	}
	return strings.Replace(s, "-", string(opSub), 1)
}

// currentNumber returns the number being typed at the end of the formula.
func currentNumber(f string) string {
	i := strings.LastIndexFunc(f, isOp)
	if i < 0 {
		return f
	}
	_, size := utf8.DecodeRuneInString(f[i:])
	return f[i+size:]
}

func lastRune(s string) rune {
	r, _ := utf8.DecodeLastRuneInString(s)
	return r
}

// calcKey applies one keypad key.
func (p *Phone) calcKey(k string) string {
	c := &p.st.Calc
	if c.Error != "" && k != "C" {
		c.Formula, c.Error, c.Done = "", "", false
	}
	switch {
	case len(k) == 1 && k[0] >= '0' && k[0] <= '9':
		if c.Done {
			c.Formula, c.Done = "", false
		}
		if currentNumber(c.Formula) == "0" {
			c.Formula = strings.TrimSuffix(c.Formula, "0")
		}
		c.Formula += k
		return "pressed " + k
	case k == ".":
		if c.Done {
			c.Formula, c.Done = "", false
		}
		cur := currentNumber(c.Formula)
		if strings.Contains(cur, ".") || strings.HasSuffix(c.Formula, "%") {
			return "the number already has a decimal point"
		}
		if cur == "" {
			c.Formula += "0"
		}
		c.Formula += "."
		return "pressed ."
	case k == "%":
		if cur := currentNumber(c.Formula); cur == "" || cur == string(opSub) {
			return "% needs a number first"
		}
		c.Done = false
		c.Formula += "%"
		return "pressed %"
	case k == "C":
		c.Formula, c.Done, c.Error = "", false, ""
		return "cleared"
	case k == "DEL":
		if c.Done {
			c.Formula, c.Done = "", false
			return "cleared"
		}
		if c.Formula == "" {
			return "nothing to delete"
		}
		_, size := utf8.DecodeLastRuneInString(c.Formula)
		c.Formula = c.Formula[:len(c.Formula)-size]
		return "deleted the last character"
	case k == "=":
		f := strings.TrimRightFunc(c.Formula, isOp)
		if f == "" {
			return "nothing to calculate"
		}
		v, err := evalFormula(f)
		if err != nil {
			c.Error = err.Error()
			if !errors.Is(err, errDivZero) {
				c.Error = "Invalid formula"
			}
			return "error: " + c.Error
		}
		c.Formula, c.Done = formatRat(v), true
		return fmt.Sprintf("%s = %s", f, c.Formula)
	default: // an operator
		op, _ := utf8.DecodeRuneInString(k)
		c.Done = false
		switch {
		case c.Formula == "":
			if op != opSub {
				return "an operator needs a number first"
			}
		case c.Formula == string(opSub):
			return "an operator needs a number first"
		case isOp(lastRune(c.Formula)):
			_, size := utf8.DecodeLastRuneInString(c.Formula)
			c.Formula = c.Formula[:len(c.Formula)-size]
		case lastRune(c.Formula) == '.':
			c.Formula += "0"
		}
		c.Formula += k
		return "pressed " + k
	}
}

func (p *Phone) calculatorView(c image.Rectangle) (*node, color.RGBA) {
	pal := p.palette()
	W := p.model.Width
	accent, onAccent := p.appColors(PkgCalculator)
	if pal.dark {
		accent = rgb(0xff, 0x9e, 0x40)
		onAccent = rgb(0x20, 0x12, 0x00)
	}
	v := newNode(classFrame, PkgCalculator, "android:id/content", c)
	v.fill = pal.bg
	st := &p.st.Calc

	dispB := c.Min.Y + (c.Dy())*36/100
	disp := newNode(classFrame, PkgCalculator, PkgCalculator+":id/display", image.Rect(0, c.Min.Y, W, dispB))
	disp.fill = pal.surface
	ffk := p.face(fontRegular, 100)
	formula := newNode(classText, PkgCalculator, PkgCalculator+":id/formula", image.Rect(p.d(48), dispB-p.d(330), W-p.d(48), dispB-p.d(170)))
	formula.el.Text = st.Formula
	formula.txt = &textBox{lines: []string{ellipsizeStart(ffk, st.Formula, formula.rect.Dx())}, face: ffk, col: pal.text, align: alignRight}
	result := ""
	resultCol := pal.text2
	switch {
	case st.Error != "":
		result, resultCol = st.Error, rgb(0xd9, 0x30, 0x25)
	case !st.Done && strings.ContainsFunc(st.Formula, isOp) && !isOp(lastRune(st.Formula)):
		if v, err := evalFormula(st.Formula); err == nil {
			result = formatRat(v)
		}
	}
	rfk := p.face(fontRegular, 64)
	res := newNode(classText, PkgCalculator, PkgCalculator+":id/result", image.Rect(p.d(48), dispB-p.d(160), W-p.d(48), dispB-p.d(40)))
	res.el.Text = result
	res.txt = &textBox{lines: []string{ellipsize(rfk, result, res.rect.Dx())}, face: rfk, col: resultCol, align: alignRight}
	disp.add(formula, res)
	v.add(disp)

	type key struct{ label, id string }
	grid := [][]key{
		{{"C", "clr"}, {"DEL", "del"}, {"%", "pct"}, {"÷", "op_div"}},
		{{"7", "digit_7"}, {"8", "digit_8"}, {"9", "digit_9"}, {"×", "op_mul"}},
		{{"4", "digit_4"}, {"5", "digit_5"}, {"6", "digit_6"}, {"−", "op_sub"}},
		{{"1", "digit_1"}, {"2", "digit_2"}, {"3", "digit_3"}, {"+", "op_add"}},
		{{"0", "digit_0"}, {".", "dec_point"}, {"=", "eq"}},
	}
	m := p.d(28)
	padTop := dispB + p.d(32)
	cellW := (W - 2*m) / 4
	cellH := (c.Max.Y - p.d(24) - padTop) / len(grid)
	kfk := p.face(fontRegular, 64)
	for ri, row := range grid {
		x := m
		for ci, k := range row {
			w := cellW
			if len(row) == 3 && ci == 0 {
				w = 2 * cellW
			}
			y := padTop + ri*cellH
			r := image.Rect(x, y, x+w, y+cellH).Inset(p.d(12))
			x += w
			btn := newLabel(PkgCalculator, PkgCalculator+":id/"+k.id, k.label, r, kfk, pal.text, alignCenter, 0)
			btn.el.Class = classButton
			btn.fill, btn.radius = pal.surface2, r.Dy()/2
			switch {
			case k.id == "eq":
				btn.fill, btn.txt.col, btn.txt.face = accent, onAccent, p.face(fontRegular, 84)
			case strings.HasPrefix(k.id, "op_"):
				btn.txt.col, btn.txt.face = accent, p.face(fontRegular, 84)
			case k.id == "pct":
				btn.txt.col = accent
			case k.id == "clr" || k.id == "del":
				btn.txt.col = rgb(0xd9, 0x30, 0x25)
				btn.txt.face = p.face(fontMedium, 52)
			}
			if k.id == "del" {
				btn.el.ContentDesc = "Delete"
			}
			label := k.label
			btn.onTap = func() (string, error) { return p.calcKey(label), nil }
			v.add(btn)
		}
	}
	return v, pal.surface
}
